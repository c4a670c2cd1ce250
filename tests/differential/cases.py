"""The bad requests of the differential test, generated per route and per field.

Every case is one client mistake (a missing, mistyped, empty, too long or unknown field,
query parameter or id, a bad body, content type or microversion, a wrong state
transition, a caller without the role or the service token it needs) with the set-up
state it needs. A case is data only: ``sides.Side`` makes the set-up and fills in the
placeholders (``{arq}``, ``{device}``, ...) with what the set-up created on that server.

Everything the cases choose themselves is fixed (names, uuids, instance ids), so two runs
send the same requests; ids the servers choose are only reached through placeholders.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# Who sends a request (``sides.identity_headers`` turns these into headers).
ADMIN = "admin"
ADMIN_SVC = "admin+service"
MEMBER = "member"
MEMBER_SVC = "member+service"
OTHER = "other-member"

# Names and uuids the cases control. Everything created starts with PREFIX, which is how
# the clean-up recognises it on both servers.
PREFIX = "dt-"
DP_NAME = "dt-dp"
DP_UUID = "d1ff0000-0000-4000-8000-00000000d001"
NEW_DP_NAME = "dt-new"
NEW_DP2_NAME = "dt-new2"
UNKNOWN_UUID = "d1ff0000-0000-4000-8000-00000000dead"
INSTANCE = "d1ff0000-0000-4000-8000-0000000000c1"
INSTANCE2 = "d1ff0000-0000-4000-8000-0000000000c2"
ATTR_KEY = "dt-key"
BAD_UUID = "not-a-uuid"
LONG = "x" * 300
HUGE = "x" * 200_000

# Set-up steps, made in this order when a case lists them (see sides.Side.setup).
SETUP_ORDER = ("dp", "arq", "arq2", "arq_member", "bound", "attr")

JSON = "application/json"


@dataclass(frozen=True)
class Raw:
    """A body sent as these bytes, not JSON-encoded (placeholders are still filled in)."""

    data: bytes


@dataclass(frozen=True)
class Case:
    """One bad request and what it needs.

    ``path`` is below the service root (``.../accelerator``), e.g. ``/v2/devices?foo=1``.
    ``body`` is JSON-encoded unless it is a :class:`Raw`; ``None`` sends no body.
    ``content_type`` is sent only with a body. ``microversion`` is the raw value of the
    ``OpenStack-API-Version`` header (none when ``None``). ``setup`` names steps of
    :data:`SETUP_ORDER`. ``note`` records a known upstream quirk for the report.
    """

    id: str
    method: str
    path: str
    body: Any = None
    identity: str = ADMIN
    content_type: str | None = JSON
    microversion: str | None = None
    setup: tuple[str, ...] = ()
    note: str = ""


def _case(route: str, problem: str, method: str, path: str, **kw: Any) -> Case:
    """A case whose id is ``<route>/<problem>``."""
    return Case(id=f"{route}/{problem}", method=method, path=path, **kw)


def _dp_body(**fields: Any) -> list[dict[str, Any]]:
    """A device profile POST body: a valid one, with ``fields`` changed (``...`` drops)."""
    dp: dict[str, Any] = {"name": NEW_DP_NAME, "groups": [{"resources:FPGA": "1"}]}
    dp.update(fields)
    return [{k: v for k, v in dp.items() if v is not ...}]


def bind_ops(hostname: Any = "{hostname}", rp: Any = "{rp_uuid}", instance: Any = INSTANCE,
             op: str = "add") -> list[dict[str, Any]]:
    """The three add (or remove) operations of a bind; ``...`` leaves a field out."""
    fields = {"/hostname": hostname, "/device_rp_uuid": rp, "/instance_uuid": instance}
    if op == "remove":
        return [{"op": "remove", "path": p} for p, v in fields.items() if v is not ...]
    return [{"op": op, "path": p, "value": v} for p, v in fields.items() if v is not ...]


def _program_body(**fields: Any) -> list[dict[str, Any]]:
    """A program PATCH body (upstream's form), with ``fields`` of the operation changed."""
    op: dict[str, Any] = {"op": "replace", "path": "/program",
                          "value": [{"image_uuid": UNKNOWN_UUID}]}
    op.update(fields)
    return [{k: v for k, v in op.items() if v is not ...}]


# ------------------------------------------------------------------ shared variants ----

BAD_MICROVERSIONS = {
    "major-3": "accelerator 3.0",
    "major-1": "accelerator 1.0",
    "minor-too-high": "accelerator 2.99",
    "minor-2.4": "accelerator 2.4",
    "bare-integer": "10",
    "bare-too-high": "2.9",
    "not-a-number": "accelerator abc",
    "minor-not-a-number": "accelerator 2.x",
    "empty-version": "accelerator ",
    "negative": "accelerator -2.1",
    "three-parts": "accelerator 2.1.1",
}

UNKNOWN_QUERY = {
    "unknown-param": "foo=1",
    "limit": "limit=1",
    "marker": f"marker={UNKNOWN_UUID}",
    "sort_key": "sort_key=created_at",
    "sort_dir": "sort_dir=asc",
}

BAD_BODIES = {
    "bad-json": Raw(b'{"name": '),
    "not-json": Raw(b"name=x&groups=y"),
    "empty-body": Raw(b""),
    "json-null": Raw(b"null"),
}

WRONG_CONTENT_TYPES = {
    "text-plain": "text/plain",
    "xml": "application/xml",
    "form": "application/x-www-form-urlencoded",
}


def _query_cases(route: str, method: str, path: str, params: dict[str, str],
                 **kw: Any) -> Iterator[Case]:
    """One case per unknown query parameter of ``params`` on ``path``."""
    sep = "&" if "?" in path else "?"
    for problem, query in params.items():
        yield _case(route, f"query-{problem}", method, f"{path}{sep}{query}", **kw)


def _body_format_cases(route: str, method: str, path: str, valid: Any,
                       **kw: Any) -> Iterator[Case]:
    """Bad JSON, empty and null bodies, and ``valid`` with wrong content types."""
    for problem, raw in BAD_BODIES.items():
        yield _case(route, f"body-{problem}", method, path, body=raw, **kw)
    for problem, ctype in WRONG_CONTENT_TYPES.items():
        yield _case(route, f"content-type-{problem}", method, path, body=valid,
                    content_type=ctype, **kw)
    yield _case(route, "content-type-missing", method, path, body=valid, content_type=None,
                **kw)


# ---------------------------------------------------------------- version documents ----

def version_cases() -> Iterator[Case]:
    """``GET /`` and ``GET /v2`` (public) and paths or methods that do not exist."""
    for problem in ("major-3", "bare-integer", "not-a-number"):
        yield _case("root", f"microversion-{problem}", "GET", "/",
                    microversion=BAD_MICROVERSIONS[problem])
    for problem, value in BAD_MICROVERSIONS.items():
        yield _case("v2", f"microversion-{problem}", "GET", "/v2", microversion=value)
    yield from _query_cases("v2", "GET", "/v2", {"unknown-param": "foo=1"})
    yield _case("v2", "unknown-collection", "GET", "/v2/bogus")
    yield _case("v2", "unknown-version", "GET", "/v3/devices")
    yield _case("root", "method-post", "POST", "/", body={})
    yield _case("root", "method-delete", "DELETE", "/")
    yield _case("v2", "method-post", "POST", "/v2", body={})
    yield _case("v2", "method-put", "PUT", "/v2", body={})
    yield _case("v2", "method-delete", "DELETE", "/v2")


def microversion_cases() -> Iterator[Case]:
    """Bad ``OpenStack-API-Version`` headers on the resource routes."""
    for problem, value in BAD_MICROVERSIONS.items():
        yield _case("devices-list", f"microversion-{problem}", "GET", "/v2/devices",
                    microversion=value)
    some = ("major-3", "minor-too-high", "bare-integer", "not-a-number")
    for problem in some:
        value = BAD_MICROVERSIONS[problem]
        yield _case("dp-list", f"microversion-{problem}", "GET", "/v2/device_profiles",
                    microversion=value)
        yield _case("dp-create", f"microversion-{problem}", "POST", "/v2/device_profiles",
                    body=_dp_body(), microversion=value)
        yield _case("arq-create", f"microversion-{problem}", "POST",
                    "/v2/accelerator_requests", body={"device_profile_name": DP_NAME},
                    microversion=value, setup=("dp",))
        yield _case("arq-patch", f"microversion-{problem}", "PATCH",
                    "/v2/accelerator_requests", body={"{arq}": bind_ops()},
                    identity=ADMIN_SVC, microversion=value, setup=("dp", "arq"))
        yield _case("arq-delete", f"microversion-{problem}", "DELETE",
                    "/v2/accelerator_requests?arqs={arq}", identity=ADMIN_SVC,
                    microversion=value, setup=("dp", "arq"))
        yield _case("deployables-show", f"microversion-{problem}", "GET",
                    "/v2/deployables/{deployable}", microversion=value)
        yield _case("attributes-list", f"microversion-{problem}", "GET", "/v2/attributes",
                    microversion=value)


# ------------------------------------------------------------------ device profiles ----

def dp_list_cases() -> Iterator[Case]:
    """``GET /v2/device_profiles``: unknown query parameters."""
    yield from _query_cases("dp-list", "GET", "/v2/device_profiles",
                            {**UNKNOWN_QUERY, "filters": "filters=a", "names": "names=x"})


def dp_show_cases() -> Iterator[Case]:
    """``GET /v2/device_profiles/{uuid_or_name}``."""
    route, base = "dp-show", "/v2/device_profiles"
    yield _case(route, "unknown-uuid", "GET", f"{base}/{UNKNOWN_UUID}")
    yield _case(route, "name-below-2.2", "GET", f"{base}/{DP_NAME}", setup=("dp",))
    yield _case(route, "name-at-2.1", "GET", f"{base}/{DP_NAME}", setup=("dp",),
                microversion="accelerator 2.1")
    yield _case(route, "unknown-name-at-2.2", "GET", f"{base}/dt-nope",
                microversion="accelerator 2.2")
    yield _case(route, "bad-uuid-at-2.2", "GET", f"{base}/{BAD_UUID}",
                microversion="accelerator 2.2")
    yield _case(route, "too-long-name-at-2.2", "GET", f"{base}/{LONG}",
                microversion="accelerator 2.2")
    yield _case(route, "unknown-uuid-member", "GET", f"{base}/{UNKNOWN_UUID}",
                identity=MEMBER)
    yield from _query_cases(route, "GET", f"{base}/{DP_UUID}", {"unknown-param": "foo=1"},
                            setup=("dp",))


def dp_create_cases() -> Iterator[Case]:
    """``POST /v2/device_profiles``: the list, then each field of the profile."""
    route, path = "dp-create", "/v2/device_profiles"

    def post(problem: str, body: Any, **kw: Any) -> Case:
        return _case(route, problem, "POST", path, body=body, **kw)

    yield from _body_format_cases(route, "POST", path, _dp_body())
    yield post("list-empty", [])
    yield post("list-of-two", _dp_body() + _dp_body(name=NEW_DP2_NAME))
    yield post("object-not-list", _dp_body()[0])
    yield post("list-of-string", ["dt-new"])
    yield post("list-of-null", [None])
    yield post("string", "dt-new")
    yield post("number", 1)
    yield post("unknown-field", _dp_body(foo="bar"))
    yield post("body-too-large", _dp_body(description=HUGE))
    # name
    for problem, value in {"missing": ..., "null": None, "empty": "", "integer": 1,
                           "list": ["dt-new"], "object": {"a": "b"}, "space": "dt new",
                           "slash": "dt/new", "dot": "dt.new", "unicode": "dt-n\u00e9w",
                           "whitespace-only": "   ", "too-long-256": "dt-" + "x" * 253,
                           "too-long-1000": "dt-" + "x" * 997}.items():
        yield post(f"name-{problem}", _dp_body(name=value))
    yield post("name-duplicate", _dp_body(name=DP_NAME), setup=("dp",))
    # groups
    for problem, value in {"missing": ..., "null": None, "empty-list": [],
                           "string": "resources:FPGA=1", "object": {"resources:FPGA": "1"},
                           "list-of-string": ["resources:FPGA"], "list-of-list": [[]],
                           "list-of-null": [None], "integer": 1}.items():
        yield post(f"groups-{problem}", _dp_body(groups=value))
    # group keys and values
    groups = {
        "key-no-prefix": {"FPGA": "1"},
        "key-unknown-prefix": {"resource:FPGA": "1"},
        "key-empty": {"": "1"},
        "resources-empty-rc": {"resources:": "1"},
        "resources-unknown-rc": {"resources:BOGUS": "1"},
        "resources-lowercase-rc": {"resources:fpga": "1"},
        "resources-amount-word": {"resources:FPGA": "one"},
        "resources-amount-empty": {"resources:FPGA": ""},
        "resources-amount-float": {"resources:FPGA": "1.5"},
        "resources-amount-null": {"resources:FPGA": None},
        "resources-amount-list": {"resources:FPGA": ["1"]},
        "resources-amount-zero": {"resources:FPGA": "0"},
        "resources-amount-negative": {"resources:FPGA": "-1"},
        "trait-not-custom": {"resources:FPGA": "1", "trait:HW_FPGA": "required"},
        "trait-empty-name": {"resources:FPGA": "1", "trait:": "required"},
        "trait-bad-value": {"resources:FPGA": "1", "trait:CUSTOM_X": "yes"},
        "trait-value-empty": {"resources:FPGA": "1", "trait:CUSTOM_X": ""},
        "trait-value-null": {"resources:FPGA": "1", "trait:CUSTOM_X": None},
        "trait-value-uppercase": {"resources:FPGA": "1", "trait:CUSTOM_X": "REQUIRED"},
        "accel-value-object": {"resources:FPGA": "1", "accel:bitstream_id": {"a": 1}},
        "key-too-long": {"resources:CUSTOM_" + "X" * 300: "1"},
    }
    for problem, group in groups.items():
        yield post(f"group-{problem}", _dp_body(groups=[group]))
    yield post("group-second-bad", _dp_body(groups=[{"resources:FPGA": "1"},
                                                    {"resources:BOGUS": "1"}]))
    # description, uuid
    for problem, value in {"integer": 1, "list": ["a"], "object": {"a": "b"},
                           "too-long-256": "d" * 256, "too-long-5000": "d" * 5000}.items():
        yield post(f"description-{problem}", _dp_body(description=value))
    yield post("uuid-empty", _dp_body(uuid=""))
    # callers
    yield post("as-member", _dp_body(), identity=MEMBER)
    yield post("as-member-with-service-token", _dp_body(), identity=MEMBER_SVC)
    yield from _query_cases(route, "POST", path, {"unknown-param": "foo=1"}, body=_dp_body())


def dp_delete_cases() -> Iterator[Case]:
    """``DELETE /v2/device_profiles/{uuid or names}`` and ``?value=``."""
    route, base = "dp-delete", "/v2/device_profiles"
    yield _case(route, "unknown-uuid", "DELETE", f"{base}/{UNKNOWN_UUID}")
    yield _case(route, "unknown-name", "DELETE", f"{base}/dt-nope")
    yield _case(route, "unknown-names", "DELETE", f"{base}/dt-nope,dt-nope2")
    yield _case(route, "known-and-unknown-name", "DELETE", f"{base}/{DP_NAME},dt-nope",
                setup=("dp",))
    yield _case(route, "value-unknown-name", "DELETE", f"{base}?value=dt-nope")
    yield _case(route, "value-empty", "DELETE", f"{base}?value=")
    yield _case(route, "no-value", "DELETE", base)
    yield _case(route, "bad-uuid", "DELETE", f"{base}/{BAD_UUID}")
    yield _case(route, "too-long-name", "DELETE", f"{base}/{LONG}")
    yield _case(route, "in-use-by-arq", "DELETE", f"{base}/{DP_UUID}", setup=("dp", "arq"),
                note="Cyborg on SQLite deletes it (no FK enforcement; its ARQ list then "
                     "404s); on MySQL the FK gives a 500")
    yield _case(route, "as-member", "DELETE", f"{base}/{DP_UUID}", identity=MEMBER,
                setup=("dp",))
    yield _case(route, "as-member-unknown", "DELETE", f"{base}/{UNKNOWN_UUID}",
                identity=MEMBER)
    yield from _query_cases(route, "DELETE", f"{base}/{UNKNOWN_UUID}",
                            {"unknown-param": "foo=1"})


# ------------------------------------------------------------- accelerator requests ----

def arq_create_cases() -> Iterator[Case]:
    """``POST /v2/accelerator_requests``."""
    route, path = "arq-create", "/v2/accelerator_requests"
    valid = {"device_profile_name": DP_NAME}

    def post(problem: str, body: Any, **kw: Any) -> Case:
        return _case(route, problem, "POST", path, body=body, **kw)

    yield from _body_format_cases(route, "POST", path, valid, setup=("dp",))
    yield post("body-empty-object", {})
    yield post("body-list", [valid], setup=("dp",))
    yield post("body-string", DP_NAME, setup=("dp",))
    for problem, value in {"null": None, "empty": "", "integer": 1, "list": [DP_NAME],
                           "object": {"name": DP_NAME}, "unknown": "dt-nope",
                           "too-long": LONG, "uuid-not-name": DP_UUID}.items():
        yield post(f"device_profile_name-{problem}", {"device_profile_name": value},
                   setup=("dp",))
    yield post("device_profile_name-wrong-key", {"device_profile": DP_NAME}, setup=("dp",))
    yield post("unknown-name-as-member", {"device_profile_name": "dt-nope"}, identity=MEMBER)
    yield from _query_cases(route, "POST", path, {"unknown-param": "foo=1"}, body=valid,
                            setup=("dp",))


def arq_list_cases() -> Iterator[Case]:
    """``GET /v2/accelerator_requests[?instance=&bind_state=]``."""
    route, path = "arq-list", "/v2/accelerator_requests"
    yield from _query_cases(route, "GET", path, {**UNKNOWN_QUERY, "arqs": f"arqs={UNKNOWN_UUID}"})
    for problem, query in {
        "instance-bad-uuid": f"instance={BAD_UUID}",
        "instance-integer": "instance=1",
        "instance-too-long": f"instance={UNKNOWN_UUID}0",
        "bind_state-unknown": "bind_state=bound",
        "bind_state-uppercase": "bind_state=Resolved",
        "bind_state-unknown-with-instance": f"bind_state=started&instance={INSTANCE}",
        "instance-bad-with-bind_state": f"instance={BAD_UUID}&bind_state=resolved",
    }.items():
        yield _case(route, problem, "GET", f"{path}?{query}")
    yield _case(route, "bind_state-unknown-as-member", "GET", f"{path}?bind_state=x",
                identity=MEMBER)


def arq_show_cases() -> Iterator[Case]:
    """``GET /v2/accelerator_requests/{uuid}``."""
    route, base = "arq-show", "/v2/accelerator_requests"
    yield _case(route, "unknown-uuid", "GET", f"{base}/{UNKNOWN_UUID}")
    yield _case(route, "bad-uuid", "GET", f"{base}/{BAD_UUID}")
    yield _case(route, "too-long", "GET", f"{base}/{LONG}")
    yield _case(route, "other-project", "GET", f"{base}/{{arq}}", identity=MEMBER,
                setup=("dp", "arq"))
    yield _case(route, "other-member-project", "GET", f"{base}/{{arq_member}}",
                identity=OTHER, setup=("dp", "arq_member"))
    yield from _query_cases(route, "GET", f"{base}/{{arq}}", {"unknown-param": "foo=1"},
                            setup=("dp", "arq"))


def _patch(problem: str, body: Any, identity: str = ADMIN_SVC,
           setup: tuple[str, ...] = ("dp", "arq"), **kw: Any) -> Case:
    """A ``PATCH /v2/accelerator_requests`` case (with a service token by default)."""
    return _case("arq-patch", problem, "PATCH", "/v2/accelerator_requests", body=body,
                 identity=identity, setup=setup, **kw)


def arq_patch_body_cases() -> Iterator[Case]:
    """The shape of the PATCH body: the map, the op lists and each op."""
    yield from _body_format_cases("arq-patch", "PATCH", "/v2/accelerator_requests",
                                  {"{arq}": bind_ops()}, identity=ADMIN_SVC,
                                  setup=("dp", "arq"))
    yield _patch("body-empty-object", {})
    yield _patch("body-list", [bind_ops()])
    yield _patch("body-string", "{arq}")
    yield _patch("ops-not-list", {"{arq}": bind_ops()[0]})
    yield _patch("ops-empty", {"{arq}": []})
    yield _patch("ops-string", {"{arq}": "add"})
    yield _patch("ops-null", {"{arq}": None})
    yield _patch("op-not-object", {"{arq}": ["add"]})
    yield _patch("op-replace", {"{arq}": bind_ops(op="replace")})
    yield _patch("op-unknown", {"{arq}": bind_ops(op="bind")})
    yield _patch("op-missing", {"{arq}": [{k: v for k, v in op.items() if k != "op"}
                                          for op in bind_ops()]})
    yield _patch("ops-add-and-remove", {"{arq}": bind_ops()[:2] + [
        {"op": "remove", "path": "/instance_uuid"}]})
    yield _patch("path-missing", {"{arq}": [{k: v for k, v in op.items() if k != "path"}
                                            for op in bind_ops()]})
    for problem, path in {"state": "/state", "uuid": "/uuid", "empty": "", "no-slash":
                          "hostname", "nested": "/hostname/x",
                          "attach_handle_uuid": "/attach_handle_uuid"}.items():
        yield _patch(f"path-{problem}", {"{arq}": bind_ops() + [
            {"op": "add", "path": path, "value": "x"}]})
    yield _patch("value-missing", {"{arq}": [{k: v for k, v in op.items() if k != "value"}
                                             for op in bind_ops()]})
    yield _patch("unknown-op-field", {"{arq}": [{**op, "from": "/x"} for op in bind_ops()]})


def arq_patch_field_cases() -> Iterator[Case]:
    """Each bind field: absent, mistyped, empty, unknown; and ``/project_id``."""
    for arg, field in (("hostname", "hostname"), ("rp", "device_rp_uuid"),
                       ("instance", "instance_uuid")):
        yield _patch(f"{field}-absent", {"{arq}": bind_ops(**{arg: ...})})
    yield _patch("only-hostname", {"{arq}": [bind_ops()[0]]})
    yield _patch("hostname-null", {"{arq}": bind_ops(hostname=None)})
    yield _patch("hostname-empty", {"{arq}": bind_ops(hostname="")})
    yield _patch("hostname-integer", {"{arq}": bind_ops(hostname=1)})
    yield _patch("hostname-unknown", {"{arq}": bind_ops(hostname="dt-no-such-host")})
    yield _patch("device_rp_uuid-unknown", {"{arq}": bind_ops(rp=UNKNOWN_UUID)})
    yield _patch("device_rp_uuid-bad", {"{arq}": bind_ops(rp=BAD_UUID)})
    yield _patch("device_rp_uuid-null", {"{arq}": bind_ops(rp=None)})
    yield _patch("device_rp_uuid-integer", {"{arq}": bind_ops(rp=1)})
    yield _patch("instance_uuid-bad", {"{arq}": bind_ops(instance=BAD_UUID)})
    yield _patch("instance_uuid-null", {"{arq}": bind_ops(instance=None)})
    yield _patch("instance_uuid-empty", {"{arq}": bind_ops(instance="")})
    yield _patch("instance_uuid-integer", {"{arq}": bind_ops(instance=1)})
    project = {"op": "add", "path": "/project_id", "value": UNKNOWN_UUID}
    yield _patch("project_id-at-2.0", {"{arq}": bind_ops() + [project]})
    yield _patch("project_id-at-2.1-as-member", {"{arq_member}": bind_ops() + [project]},
                 identity=MEMBER_SVC, setup=("dp", "arq_member"),
                 microversion="accelerator 2.1")
    yield _patch("project_id-bad-at-2.1", {"{arq}": bind_ops() + [
        {"op": "add", "path": "/project_id", "value": BAD_UUID}]},
        microversion="accelerator 2.1")


def arq_patch_target_cases() -> Iterator[Case]:
    """Which ARQ is patched, by whom, and in which state."""
    yield _patch("arq-unknown", {UNKNOWN_UUID: bind_ops()})
    yield _patch("arq-key-bad-uuid", {BAD_UUID: bind_ops()})
    yield _patch("arq-known-and-unknown", {"{arq}": bind_ops(), UNKNOWN_UUID: bind_ops()})
    yield _patch("unbind-unknown", {UNKNOWN_UUID: bind_ops(op="remove")})
    yield _patch("no-service-token", {"{arq}": bind_ops()}, identity=ADMIN)
    yield _patch("no-service-token-member", {"{arq_member}": bind_ops()}, identity=MEMBER,
                 setup=("dp", "arq_member"))
    yield _patch("unbind-no-service-token", {"{arq}": bind_ops(op="remove")},
                 identity=ADMIN, setup=("dp", "arq", "bound"))
    yield _patch("other-project-arq", {"{arq}": bind_ops()}, identity=MEMBER_SVC)
    yield _patch("bind-twice-same-instance", {"{arq}": bind_ops()},
                 setup=("dp", "arq", "bound"))
    yield _patch("bind-bound-to-other-instance", {"{arq}": bind_ops(instance=INSTANCE2)},
                 setup=("dp", "arq", "bound"))
    yield _patch("bind-second-arq-to-bound-instance", {"{arq2}": bind_ops()},
                 setup=("dp", "arq", "arq2", "bound"))
    yield _patch("bind-bad-bound-mix", {"{arq2}": bind_ops(instance=INSTANCE2),
                                        "{arq}": bind_ops(instance=INSTANCE2)},
                 setup=("dp", "arq", "arq2", "bound"))
    yield _patch("remove-with-value", {"{arq}": [{"op": "remove", "path": "/hostname",
                                                  "value": "x"}]},
                 setup=("dp", "arq", "bound"))
    yield _case("arq-patch", "path-uuid-unknown-arq", "PATCH",
                f"/v2/accelerator_requests/{UNKNOWN_UUID}", body={UNKNOWN_UUID: bind_ops()},
                identity=ADMIN_SVC)
    yield from _query_cases("arq-patch", "PATCH", "/v2/accelerator_requests",
                            {"unknown-param": "foo=1"}, body={"{arq}": bind_ops()},
                            identity=ADMIN_SVC, setup=("dp", "arq"))


def arq_delete_cases() -> Iterator[Case]:
    """``DELETE /v2/accelerator_requests?arqs=|instance=`` and ``/{uuid}``."""
    route, path = "arq-delete", "/v2/accelerator_requests"
    queries = {
        "no-query": "",
        "arqs-and-instance": f"?arqs={{arq}}&instance={INSTANCE}",
        "arqs-empty": "?arqs=",
        "instance-empty": "?instance=",
        "arqs-unknown": f"?arqs={UNKNOWN_UUID}",
        "arqs-bad-uuid": f"?arqs={BAD_UUID}",
        "arqs-known-and-unknown": f"?arqs={{arq}},{UNKNOWN_UUID}",
        "arqs-trailing-comma": "?arqs={arq},",
        "instance-bad-uuid": f"?instance={BAD_UUID}",
        "instance-integer": "?instance=1",
        "unknown-param": "?foo=1",
        "unknown-param-with-arqs": "?arqs={arq}&foo=1",
    }
    for problem, query in queries.items():
        yield _case(route, problem, "DELETE", path + query, identity=ADMIN_SVC,
                    setup=("dp", "arq"))
    yield _case(route, "instance-no-service-token", "DELETE", f"{path}?instance={INSTANCE}",
                setup=("dp", "arq", "bound"))
    yield _case(route, "instance-member-no-service-token", "DELETE",
                f"{path}?instance={INSTANCE}", identity=MEMBER)
    yield _case(route, "bound-arq-no-service-token", "DELETE", f"{path}?arqs={{arq}}",
                setup=("dp", "arq", "bound"))
    yield _case(route, "bound-arq-by-path-no-service-token", "DELETE", f"{path}/{{arq}}",
                setup=("dp", "arq", "bound"))
    yield _case(route, "other-project-arq", "DELETE", f"{path}?arqs={{arq}}", identity=MEMBER,
                setup=("dp", "arq"))
    yield _case(route, "other-member-project-arq", "DELETE", f"{path}/{{arq_member}}",
                identity=OTHER, setup=("dp", "arq_member"))
    yield _case(route, "path-unknown-uuid", "DELETE", f"{path}/{UNKNOWN_UUID}",
                identity=ADMIN_SVC)
    yield _case(route, "path-bad-uuid", "DELETE", f"{path}/{BAD_UUID}", identity=ADMIN_SVC)
    yield _case(route, "deleted-twice", "DELETE", f"{path}?arqs={{arq}},{{arq}}",
                identity=ADMIN_SVC, setup=("dp", "arq"))


# ------------------------------------------------------------------------ inventory ----

def device_cases() -> Iterator[Case]:
    """``GET /v2/devices[/{uuid}]`` and ``POST /v2/devices/{uuid}/enable|disable``."""
    yield from _query_cases("devices-list", "GET", "/v2/devices",
                            {**UNKNOWN_QUERY, "filters": "filters=a", "status": "status=x"})
    yield _case("devices-list", "as-member", "GET", "/v2/devices", identity=MEMBER)
    yield _case("devices-list", "filtered-as-member", "GET", "/v2/devices?type=FPGA",
                identity=MEMBER)
    yield _case("devices-show", "unknown-uuid", "GET", f"/v2/devices/{UNKNOWN_UUID}")
    yield _case("devices-show", "bad-uuid", "GET", f"/v2/devices/{BAD_UUID}")
    yield _case("devices-show", "too-long", "GET", f"/v2/devices/{LONG}")
    yield _case("devices-show", "as-member", "GET", "/v2/devices/{device}", identity=MEMBER)
    yield from _query_cases("devices-show", "GET", "/v2/devices/{device}",
                            {"unknown-param": "foo=1"})
    for action in ("enable", "disable"):
        route = f"devices-{action}"
        yield _case(route, "unknown-uuid", "POST", f"/v2/devices/{UNKNOWN_UUID}/{action}")
        yield _case(route, "bad-uuid", "POST", f"/v2/devices/{BAD_UUID}/{action}")
        yield _case(route, "as-member", "POST", f"/v2/devices/{{device}}/{action}",
                    identity=MEMBER)
        yield _case(route, "as-member-with-service-token", "POST",
                    f"/v2/devices/{{device}}/{action}", identity=MEMBER_SVC)
        yield _case(route, "method-get", "GET", f"/v2/devices/{{device}}/{action}")
        yield _case(route, "unknown-uuid-microversion-bad", "POST",
                    f"/v2/devices/{UNKNOWN_UUID}/{action}", microversion="accelerator 2.9")
    yield _case("devices-show", "unknown-action", "POST", "/v2/devices/{device}/reboot")


def deployable_cases() -> Iterator[Case]:
    """``GET /v2/deployables[/{uuid}]``."""
    yield from _query_cases("deployables-list", "GET", "/v2/deployables",
                            {**UNKNOWN_QUERY, "filters": "filters=a"})
    yield _case("deployables-list", "as-member", "GET", "/v2/deployables", identity=MEMBER)
    yield _case("deployables-show", "unknown-uuid", "GET", f"/v2/deployables/{UNKNOWN_UUID}")
    yield _case("deployables-show", "bad-uuid", "GET", f"/v2/deployables/{BAD_UUID}")
    yield _case("deployables-show", "too-long", "GET", f"/v2/deployables/{LONG}")
    yield _case("deployables-show", "as-member", "GET", "/v2/deployables/{deployable}",
                identity=MEMBER)
    yield from _query_cases("deployables-show", "GET", "/v2/deployables/{deployable}",
                            {"unknown-param": "foo=1"})


def program_cases() -> Iterator[Case]:
    """``PATCH /v2/deployables/{uuid}/program``: none of these may start programming."""
    route, path = "deployables-program", "/v2/deployables/{deployable}/program"

    def patch(problem: str, body: Any, **kw: Any) -> Case:
        return _case(route, problem, "PATCH", kw.pop("at", path), body=body, **kw)

    yield from _body_format_cases(route, "PATCH", path, _program_body())
    yield patch("unknown-deployable", _program_body(),
                at=f"/v2/deployables/{UNKNOWN_UUID}/program")
    yield patch("bad-deployable-uuid", _program_body(),
                at=f"/v2/deployables/{BAD_UUID}/program")
    yield patch("body-object", _program_body()[0])
    yield patch("body-empty-list", [])
    yield patch("body-string", "program")
    yield patch("op-missing", _program_body(op=...))
    yield patch("op-unknown", _program_body(op="bogus"))
    yield patch("op-integer", _program_body(op=1))
    yield patch("path-missing", _program_body(path=...))
    yield patch("path-bad-format", _program_body(path="program"))
    yield patch("path-internal-uuid", _program_body(path="/uuid"))
    yield patch("path-internal-name", _program_body(path="/name"))
    yield patch("value-missing", _program_body(value=...))
    yield patch("value-empty-list", _program_body(value=[]))
    yield patch("value-object", _program_body(value={"image_uuid": UNKNOWN_UUID}))
    yield patch("value-string", _program_body(value=UNKNOWN_UUID))
    yield patch("image_uuid-missing", _program_body(value=[{}]))
    yield patch("image_uuid-bad", _program_body(value=[{"image_uuid": BAD_UUID}]))
    yield patch("image_uuid-integer", _program_body(value=[{"image_uuid": 1}]))
    yield patch("image_uuid-empty", _program_body(value=[{"image_uuid": ""}]))
    yield patch("image_uuid-null", _program_body(value=[{"image_uuid": None}]))
    yield patch("unknown-op-field", _program_body(foo="bar"))
    yield patch("image-sha256-absent", _program_body(),
                note="valid for Cyborg: it asks Glance for the image (none here: 500)")
    yield patch("as-member", _program_body(), identity=MEMBER)
    yield patch("as-member-unknown-deployable", _program_body(), identity=MEMBER,
                at=f"/v2/deployables/{UNKNOWN_UUID}/program")
    yield _case(route, "method-post", "POST", path, body=_program_body())
    yield _case(route, "method-put", "PUT", path, body=_program_body())


def attribute_read_cases() -> Iterator[Case]:
    """``GET /v2/attributes[?deployable_id=&key=]`` and ``/{uuid}``."""
    route = "attributes-list"
    yield from _query_cases(route, "GET", "/v2/attributes", UNKNOWN_QUERY)
    for problem, query in {"deployable_id-word": "deployable_id=abc",
                           "deployable_id-float": "deployable_id=1.5",
                           "deployable_id-uuid": "deployable_id={deployable}"}.items():
        yield _case(route, problem, "GET", f"/v2/attributes?{query}")
    yield _case(route, "as-member", "GET", "/v2/attributes", identity=MEMBER)
    route = "attributes-show"
    yield _case(route, "unknown-uuid", "GET", f"/v2/attributes/{UNKNOWN_UUID}")
    yield _case(route, "bad-uuid", "GET", f"/v2/attributes/{BAD_UUID}")
    yield _case(route, "too-long", "GET", f"/v2/attributes/{LONG}")
    yield _case(route, "as-member", "GET", "/v2/attributes/{attr}", identity=MEMBER,
                setup=("attr",))
    yield from _query_cases(route, "GET", "/v2/attributes/{attr}", {"unknown-param": "foo=1"},
                            setup=("attr",))


def _attr_body(**fields: Any) -> dict[str, Any]:
    """An attribute POST body: a valid one, with ``fields`` changed (``...`` drops)."""
    attr: dict[str, Any] = {"deployable_id": "{deployable_id}", "key": ATTR_KEY,
                            "value": "dt-value"}
    attr.update(fields)
    return {k: v for k, v in attr.items() if v is not ...}


def attribute_write_cases() -> Iterator[Case]:
    """``POST /v2/attributes`` per field, and ``DELETE /v2/attributes/{uuid}``."""
    route, path = "attributes-create", "/v2/attributes"

    def post(problem: str, body: Any, **kw: Any) -> Case:
        return _case(route, problem, "POST", path, body=body, **kw)

    yield from _body_format_cases(route, "POST", path, _attr_body())
    yield post("body-list", [_attr_body()])
    yield post("body-empty-object", {})
    yield post("unknown-field", _attr_body(foo="bar"))
    yield post("uuid-given", _attr_body(uuid=UNKNOWN_UUID))
    for problem, value in {"missing": ..., "null": None, "word": "abc", "float": 1.5,
                           "list": [1], "unknown": 999999, "negative": -1}.items():
        yield post(f"deployable_id-{problem}", _attr_body(deployable_id=value))
    for field in ("key", "value"):
        for problem, value in {"missing": ..., "null": None, "integer": 1, "list": ["a"],
                               "object": {"a": "b"}, "too-long": "dt-" + "k" * 300}.items():
            yield post(f"{field}-{problem}", _attr_body(**{field: value}))
    yield post("as-member", _attr_body(), identity=MEMBER)
    route = "attributes-delete"
    yield _case(route, "unknown-uuid", "DELETE", f"/v2/attributes/{UNKNOWN_UUID}")
    yield _case(route, "bad-uuid", "DELETE", f"/v2/attributes/{BAD_UUID}")
    yield _case(route, "no-uuid", "DELETE", "/v2/attributes")
    yield _case(route, "as-member", "DELETE", "/v2/attributes/{attr}", identity=MEMBER,
                setup=("attr",))
    yield from _query_cases(route, "DELETE", "/v2/attributes/{attr}",
                            {"unknown-param": "foo=1"}, setup=("attr",))


def method_cases() -> Iterator[Case]:
    """Methods a route does not have (there is no PUT anywhere)."""
    for problem, method, path in (
        ("dp-put", "PUT", "/v2/device_profiles"),
        ("dp-patch", "PATCH", f"/v2/device_profiles/{DP_UUID}"),
        ("dp-put-one", "PUT", f"/v2/device_profiles/{DP_UUID}"),
        ("arq-put", "PUT", "/v2/accelerator_requests"),
        ("arq-post-one", "POST", "/v2/accelerator_requests/{arq}"),
        ("devices-post", "POST", "/v2/devices"),
        ("devices-delete", "DELETE", "/v2/devices/{device}"),
        ("devices-patch", "PATCH", "/v2/devices/{device}"),
        ("deployables-post", "POST", "/v2/deployables"),
        ("deployables-delete", "DELETE", "/v2/deployables/{deployable}"),
        ("attributes-put", "PUT", "/v2/attributes/{attr}"),
        ("attributes-patch", "PATCH", "/v2/attributes/{attr}"),
    ):
        body = {} if method in ("PUT", "PATCH", "POST") else None
        yield _case("methods", problem, method, path, body=body,
                    setup=("dp", "arq", "attr"))


def unprefixed_cases() -> Iterator[Case]:
    """Cyborg's routing quirk: a collection without ``/v2`` is served as ``/v2/...``."""
    yield _case("unprefixed", "devices-unknown-param", "GET", "/devices?foo=1")
    yield _case("unprefixed", "dp-show-unknown", "GET", f"/device_profiles/{UNKNOWN_UUID}")
    yield _case("unprefixed", "arq-list-bad-instance", "GET",
                f"/accelerator_requests?instance={BAD_UUID}")


def corrupting_cases() -> Iterator[Case]:
    """Profiles with a bad or taken ``uuid``, which Cyborg on SQLite stores. With a uuid
    that is not a UUID it answers 400 (rendering the answer fails) after the conductor
    stored the profile, and its profile list answers 400 from then on; with a taken uuid
    it answers 201, and neither profile can be deleted any more (404). Neither can be
    undone through the API: run these only on demand (``--include-corrupting``) and
    restart Cyborg afterwards (``start.sh --fresh``)."""
    for problem, value in {"bad": BAD_UUID, "integer": 1,
                           "too-long": UNKNOWN_UUID + "0"}.items():
        yield _case("dp-create", f"uuid-{problem}", "POST", "/v2/device_profiles",
                    body=_dp_body(uuid=value),
                    note="Cyborg on SQLite answers 400 but has stored it; its DP list then "
                         "400s for good")
    yield _case("dp-create", "uuid-duplicate", "POST", "/v2/device_profiles",
                body=_dp_body(uuid=DP_UUID), setup=("dp",),
                note="Cyborg on SQLite stores a second profile with that uuid (the contract "
                     "says 500 on MySQL); neither can be deleted through the API afterwards")


GENERATORS = (
    version_cases, microversion_cases, dp_list_cases, dp_show_cases, dp_create_cases,
    dp_delete_cases, arq_create_cases, arq_list_cases, arq_show_cases, arq_patch_body_cases,
    arq_patch_field_cases, arq_patch_target_cases, arq_delete_cases, device_cases,
    deployable_cases, program_cases, attribute_read_cases, attribute_write_cases,
    method_cases, unprefixed_cases,
)


CORRUPTING = (corrupting_cases,)


def all_cases(generators: Iterable[Callable[[], Iterable[Case]]] = GENERATORS) -> list[Case]:
    """Every case, in a fixed order; raises if two share an id or a set-up step is unknown."""
    cases = [case for gen in generators for case in gen()]
    seen: set[str] = set()
    for case in cases:
        if case.id in seen:
            raise ValueError(f"duplicate case id {case.id}")
        unknown = set(case.setup) - set(SETUP_ORDER)
        if unknown:
            raise ValueError(f"{case.id}: unknown set-up steps {sorted(unknown)}")
        seen.add(case.id)
    return cases

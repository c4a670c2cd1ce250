"""Cyborg v2 accelerator requests (ARQs), ``/v2/accelerator_requests`` (contract:
shared/docs/cyborg-v2-contract.md 1.3 rows 6-10, 1.4 and 3). Non-admins see only their
project's ARQs. Binding, and an unbind whose handle the host must release, go to the
conductor (one RPC per request). Where Cyborg answers a client mistake with 500 acceld
answers 400 or 409. No policy relaxes the service-token gate (CVE-2026-40214): bind,
unbind, ``DELETE ?instance=`` and deleting an ARQ tied to an instance need ``service``
among the service token's roles.
"""

from __future__ import annotations

from typing import Any

import webob

from acceld import exception, limits
from acceld import states as st
from acceld.api import errors, listing, microversion, util
from acceld.conductor import availability as fit
from acceld.notify import payloads
from acceld.objects import arqs as arq_objects
from acceld.objects import availability as fleet_rows
from acceld.objects import device_profiles, hostwork

PROJECT_ID_VERSION = microversion.Version(2, 1)
SERVICE_ROLE = "service"
BIND_FIELDS = ("hostname", "device_rp_uuid", "instance_uuid")


def _present(req: webob.Request, record: dict[str, Any]) -> dict[str, Any]:
    return util.linked(req, "accelerator_requests", record)


def _has_service_token(req: webob.Request) -> bool:
    return SERVICE_ROLE in (req.environ["acceld.context"].service_roles or [])


def _require_service_token(req: webob.Request) -> None:
    if not _has_service_token(req):
        raise errors.HTTPError(403, "This operation requires a service token. Use the "
                               "Compute API to manage instance accelerators.",
                               "acceld.service_token_required")


def parse_ops(uuid: str, ops: list[dict[str, Any]], version: microversion.Version,
              is_admin: bool) -> dict[str, str | None] | None:
    """One ARQ's schema-valid patch, checked in Cyborg's order (HTTPError 400, 406, 403):
    the bind fields of an add, or None for a remove (unbind)."""
    kinds = {op["op"] for op in ops}
    if len(kinds) != 1:
        raise errors.invalid(f"Patch of ARQ {uuid}: the operations must be all "
                             "'add' (bind) or all 'remove' (unbind).")
    values = {op["path"].lstrip("/"): op.get("value") for op in ops}
    if "project_id" in values:
        if version < PROJECT_ID_VERSION:
            raise errors.HTTPError(406, f"Patching /project_id needs microversion "
                                   f"{PROJECT_ID_VERSION} or later.", "acceld.microversion")
        if not is_admin:
            raise errors.HTTPError(403, "Policy does not allow cyborg:arq:update to be "
                                   "performed.", "acceld.forbidden")
    if kinds == {"remove"}:
        return None
    absent = [f for f in BIND_FIELDS if f not in values]
    if absent:
        raise errors.invalid(f"Fields absent in patch of ARQ {uuid}: {', '.join(absent)}.")
    # Cyborg stores what it is given; an unknown device_rp_uuid is a 404 at the bind
    fields = {f: util.text(values[f]) for f in BIND_FIELDS}
    for field in ("instance_uuid", "device_rp_uuid"):    # as long as their columns hold
        fields[field] = util.canonical_uuid(fields[field])
        if len(fields[field]) > limits.UUID_LENGTH:
            raise errors.invalid(f"Invalid body field '{uuid}/{field}': "
                                 f"{limits.prefix(fields[field])} is longer than "
                                 f"{limits.UUID_LENGTH} characters.")
    # A bind never changes an ARQ's project (the binder may be an admin of another
    # project, e.g. Nova's evacuate): /project_id only fills in a missing one.
    owner = values.get("project_id")
    fields["project_id"] = None if owner is None else util.text(owner)
    return fields


def create_arqs(req: webob.Request, body: dict[str, Any]) -> util.Reply:
    """POST /v2/accelerator_requests {"device_profile_name"} -> 201 {"arqs": [...]}, one
    Initial ARQ per requested unit of each group; 400 no name; 404 unknown profile."""
    app = util.state(req)
    records = arq_objects.create(app.db, util.text(body["device_profile_name"]),
                                 req.environ["acceld.context"].project_id,
                                 app.api.max_arqs_per_profile)
    for record in records:
        app.notifier.emit("acceld.arq.created", payloads.ArqPayload.of(record))
    return util.json_response({"arqs": [_present(req, r) for r in records]}, status=201)


def list_arqs(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v2/accelerator_requests[?instance=<uuid>][&bind_state=resolved]
    [&limit=&marker=] -> 200 {"arqs": [...]} (``acceld.api.listing``); 423 when an
    instance's ARQs are not all resolved; 400 bad query."""
    limit, marker = listing.page_params(req, query)
    instance = util.canonical_uuid(query["instance"]) if "instance" in query else None
    found = arq_objects.list_arqs(util.state(req).db, project_id=util.project_scope(req),
                                  instance_uuid=instance, resolved_only="bind_state" in query,
                                  limit=limit, marker=marker)
    return listing.respond(req, "arqs", found, _present)


def show_arq(req: webob.Request, uuid: str) -> util.Reply:
    """GET /v2/accelerator_requests/{uuid} -> 200 the bare ARQ; 404 (also another
    project's)."""
    record = arq_objects.get(util.state(req).db, util.require_uuid(uuid),
                             project_id=util.project_scope(req))
    return util.json_response(_present(req, record))


def update_arqs(req: webob.Request, body: dict[str, Any], uuid: str | None = None) -> util.Reply:
    """PATCH /v2/accelerator_requests {arq_uuid: [json-patch ops]} -> 202 no body (a
    trailing /{uuid} is ignored; the body wins). All adds bind, all removes unbind; 400
    bad patch or instance already bound; 403 no service token; 404 unknown ARQ, deployable
    or no free handle; 406 /project_id below 2.1; 409 ARQ in the wrong state."""
    ctx = req.environ["acceld.context"]
    version = microversion.of(req.environ)
    patch = {util.canonical_uuid(u): parse_ops(u, ops, version, ctx.is_admin)
             for u, ops in body.items()}
    binds = {u: f for u, f in patch.items() if f is not None}
    if binds and len(binds) != len(patch):
        raise errors.invalid("One request either binds or unbinds ARQs, not both.")
    _require_service_token(req)
    if binds:
        for fields in binds.values():       # who asked, for the ledger (a user id or None)
            fields["user_id"] = ctx.user_id
        util.state(req).conductor.arq_bind(binds, util.project_scope(req))
    else:
        _unbind(req, sorted(patch))
    return util.empty_response(202)


def _unbind(req: webob.Request, uuids: list[str]) -> None:
    """Each ARQ whose freed handle needs no host work is unbound here, the others by the
    conductor; every ARQ is tried and the first error raised."""
    app, scope = util.state(req), util.project_scope(req)
    errs: list[exception.AccelDError] = []
    rest: list[str] = []
    for uuid in uuids:
        try:
            if arq_objects.unbind_unless_host_work(
                    app.db, uuid, project_id=scope, needs_host_work=hostwork.needs_host_work,
                    user_id=req.environ["acceld.context"].user_id):
                _notify_unbound(app, uuid)
            else:
                rest.append(uuid)
        except exception.AccelDError as exc:
            errs.append(exc)
    if rest:
        try:
            app.conductor.arq_unbind(rest, scope)
        except exception.AccelDError as exc:
            errs.append(exc)
    if errs:
        raise errs[0]


def _notify_unbound(app: util.AppState, uuid: str) -> None:
    """acceld.arq.unbound, with the ARQ as it is now (still Unbound)."""
    if not app.notifier.enabled:
        return
    try:
        record = arq_objects.get(app.db, uuid, project_id=None)
    except exception.ARQNotFound:       # deleted meanwhile: that sends its own
        return
    if record["state"] == st.ARQ_UNBOUND:
        app.notifier.emit("acceld.arq.unbound", payloads.ArqPayload.of(record))


def delete_arqs(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """DELETE /v2/accelerator_requests?arqs=u1,u2 | ?instance=<uuid> -> 204 (unbinding
    first). ``arqs``: all or nothing, 404 for a missing one, 403 without a service token
    for one tied to an instance. ``instance``: idempotent, always needs a service token.
    Both or neither: 400."""
    if ("arqs" in query) == ("instance" in query):
        raise errors.invalid("Exactly one of the query parameters 'arqs' and "
                             "'instance' is required.")
    if "instance" in query:
        _require_service_token(req)
        instance, deleted = util.canonical_uuid(query["instance"]), []
        freed = arq_objects.delete_by_instance(util.state(req).db, instance,
                                               project_id=util.project_scope(req),
                                               deleted=deleted,
                                               user_id=req.environ["acceld.context"].user_id)
        return _deleted(req, freed, deleted, instance)
    return _delete_uuids(req, [util.canonical_uuid(u) for u in query["arqs"].split(",")])


def _delete_uuids(req: webob.Request, uuids: list[str]) -> util.Reply:
    """As Cyborg, an empty name (``arqs=u1,``) is an ARQ not found; a name given twice is
    a 404 before anything is deleted (Cyborg deletes the first)."""
    if uuids == [""]:
        raise errors.invalid("No ARQ named in 'arqs'.")
    twice = sorted({u for u in uuids if uuids.count(u) > 1})
    if twice:
        raise exception.ARQNotFound(f"ARQ not found with uuids {twice}: each named twice.")
    freed = arq_objects.delete_by_uuids(util.state(req).db, uuids,
                                        project_id=util.project_scope(req),
                                        service=_has_service_token(req),
                                        user_id=req.environ["acceld.context"].user_id)
    return _deleted(req, freed, sorted(set(uuids)), None)


def _deleted(req: webob.Request, freed: list[dict[str, Any]], deleted: list[str],
             instance: str | None) -> util.Reply:
    """The 204, once the conductor had the agents release the host state (an mdev, a VF
    set up for a guest) the handles ``freed`` from deleted bound ARQs may hold; an
    acceld.arq.deleted notification per ARQ ``deleted``."""
    app = util.state(req)
    for uuid in deleted:
        app.notifier.emit("acceld.arq.deleted",
                          payloads.ArqDeletedPayload(uuid=uuid, instance_uuid=instance))
    if freed:
        app.conductor.release_handles(freed)
    return util.empty_response(204)


def delete_arq(req: webob.Request, uuid: str) -> util.Reply:
    """DELETE /v2/accelerator_requests/{uuid} -> 204; as ``?arqs=<uuid>``."""
    return _delete_uuids(req, [uuid])


def dry_run(req: webob.Request, body: dict[str, Any]) -> util.Reply:
    """POST /v2/accelerator_requests/dry_run {"device_profile_name", "hostname"?,
    "group_policy"?} -> 200 whether the profile's ARQs would bind now and where (acceld
    extension, any microversion); nothing is written; 404 no such profile."""
    app = util.state(req)
    profile = device_profiles.get(app.db, name=body["device_profile_name"])
    rows = fleet_rows.read_fleet(app.db, app.conf.conductor.service_down_time)
    return util.json_response(fit.dry_run(profile, rows, body.get("group_policy", "none"),
                                          body.get("hostname")))

"""The route table (data) and the dispatcher: acceld's only router.

Each path (literal and ``{name}`` segments) maps HTTP methods to handlers; an unknown path
is a 404, another method a 405 with ``Allow``. A leading ``/accelerator`` (devstack's
mount) is stripped. Below ``/v2`` the microversion is negotiated before routing and every
response, errors included, carries its headers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import webob

from acceld import policies
from acceld.api import errors, listcache, metrics, microversion, request_id, util
from acceld.api.handlers import (
    accelerators,
    arqs,
    device_profiles,
    hot_plug,
    ledger,
    operator,
    program,
    root,
    ui,
    v2_inventory,
)
from acceld.api.reply import Reply
from acceld.api.schemas import responses as r
from acceld.api.schemas import v1, v2

# The schema of each path parameter (the router passes any one non-empty segment; a value
# outside an ``enum`` is an unknown sub-resource, a 404 before the request is read).
_SEGMENT = {"type": "string", "minLength": 1, "pattern": "^[^/]+$"}
PATH_PARAMETERS: dict[str, dict[str, Any]] = {
    "uuid": {"type": "string", "format": "uuid"},
    "name_or_uuid": _SEGMENT,
    "name": _SEGMENT,
    "acc_spec": {"enum": ["acc_specs", "acc_spec"]},
}


@dataclasses.dataclass(frozen=True)
class Op:
    """One route's method: its handler and what ``acceld.api.openapi`` says of it.

    The router validates the request with ``query`` and ``body`` (None: none is read;
    ``body_optional``: an empty body is ``{}``; ``wrapper``: the body may come wrapped in
    that one key) after the policy check, and calls the handler with the path parameters,
    ``body`` and, where the query schema names parameters, ``query``. ``errors``: the
    statuses besides those every route of its kind may answer; ``media_type``: what a
    success carries (/metrics and the fleet view's files are not JSON)."""

    handler: Callable[..., Reply]
    status: int
    response: dict[str, Any] | None
    query: dict[str, Any] | None = None
    body: dict[str, Any] | None = None
    body_optional: bool = False
    wrapper: str | None = None
    errors: tuple[int, ...] = ()
    headers: tuple[str, ...] = ()
    media_type: str = "application/json"


# the fleet view's files (public: they hold no data; the page reads the API with a token)
_UI = {"/ui": (ui.page, "index.html"), "/ui/fleet.js": (ui.script, "fleet.js"),
       "/ui/fleet.css": (ui.stylesheet, "fleet.css")}

OPERATIONS: dict[str, dict[str, Op]] = {
    "/": {"GET": Op(root.versions, 200, r.VERSIONS)},
    "/openapi.json": {"GET": Op(root.openapi_document, 200, r.OPENAPI)},
    "/v1": {"GET": Op(root.v1, 200, r.V1_VERSION)},
    "/metrics": {"GET": Op(operator.scrape, 200, r.METRICS, media_type=metrics.CONTENT_TYPE)},
    "/v1/accelerators": {
        "GET": Op(accelerators.list_accelerators, 200, r.ACCELERATORS, query=v1.LIST_QUERY),
        "POST": Op(accelerators.create_accelerator, 201, None, body=v1.CREATE, errors=(409,),
                   headers=("Location",))},
    "/v1/accelerators/{uuid}": {
        "GET": Op(accelerators.show_accelerator, 200, r.ACCELERATOR, query=v1.NO_QUERY,
                  headers=("ETag",)),
        "PUT": Op(accelerators.attach, 200, r.ACCELERATOR, body=v1.ATTACH,
                  errors=(409, 502, 503), headers=("ETag",)),
        "DELETE": Op(accelerators.detach, 204, None, errors=(409, 502, 503))},
    "/v1/accelerators/{uuid}/state": {
        "PUT": Op(accelerators.set_state, 200, r.ACCELERATOR, body=v1.SET_STATE,
                  errors=(409, 503), headers=("ETag",))},
    "/v1/accelerators/{uuid}/stats": {
        "GET": Op(operator.device_stats, 200, r.DEVICE_STATS, query=v1.NO_QUERY,
                  errors=(409, 503))},
    # before {acc_spec}: the first route that matches serves
    "/v1/accelerators/{uuid}/health": {
        "GET": Op(operator.show_health, 200, r.DEVICE_HEALTH, query=v1.NO_QUERY),
        "POST": Op(operator.health_action, 200, r.DEVICE_HEALTH, body=v1.HEALTH_ACTION,
                   errors=(409, 503))},
    "/v1/accelerators/{uuid}/maintenance": {
        "PUT": Op(operator.drain, 200, r.DEVICE_HEALTH, body=v1.MAINTENANCE,
                  body_optional=True, errors=(503,)),
        "DELETE": Op(operator.undrain, 200, r.DEVICE_HEALTH, query=v1.NO_QUERY,
                     errors=(503,))},
    "/v1/accelerators/{uuid}/{acc_spec}": {
        "PUT": Op(accelerators.update_specs, 200, r.ACCELERATOR, body=v1.UPDATE_SPECS,
                  errors=(409, 428), headers=("ETag",))},
    "/v1/services": {"GET": Op(operator.list_services, 200, r.SERVICES, query=v1.NO_QUERY)},
    "/v1/drivers": {"GET": Op(operator.list_drivers, 200, r.DRIVERS, query=v1.DRIVER_QUERY)},
    "/v1/drivers/{name}/action": {
        "POST": Op(operator.driver_action, 200, r.DRIVER_RESULTS, body=v1.DRIVER_ACTION,
                   errors=(503,))},
    "/v1/backends": {"GET": Op(operator.list_backends, 200, r.BACKENDS, query=v1.BACKEND_QUERY)},
    "/v1/guests": {"GET": Op(operator.list_guests, 200, r.GUESTS, query=v1.BACKEND_QUERY,
                             errors=(503,))},
    "/v1/discover": {
        "POST": Op(operator.discover, 202, r.DISCOVERED, body=v1.DISCOVER, body_optional=True,
                   errors=(503,))},
    "/v1/placement": {
        "GET": Op(operator.placement_status, 200, r.PLACEMENT_STATUS, query=v1.NO_QUERY)},
    "/v1/placement/sync": {
        "POST": Op(operator.placement_sync, 200, r.PLACEMENT_SYNC, body=v1.PLACEMENT_SYNC,
                   body_optional=True, errors=(503,))},
    "/v1/ledger": {"GET": Op(ledger.list_ledger, 200, r.LEDGER, query=v1.LEDGER_QUERY)},
    "/v1/usage": {"GET": Op(ledger.usage, 200, r.USAGE, query=v1.USAGE_QUERY)},
    "/v2": {"GET": Op(root.v2, 200, r.V2_VERSION, query=v2.NO_QUERY)},
    "/v2/devices": {
        "GET": Op(v2_inventory.list_devices, 200, r.DEVICES, query=v2.DEVICE_LIST_QUERY)},
    "/v2/devices/{uuid}": {"GET": Op(v2_inventory.show_device, 200, r.DEVICE, query=v2.NO_QUERY)},
    "/v2/devices/{uuid}/enable": {
        "POST": Op(v2_inventory.enable_device, 200, None, query=v2.NO_QUERY)},
    "/v2/devices/{uuid}/disable": {
        "POST": Op(v2_inventory.disable_device, 200, None, query=v2.NO_QUERY, errors=(409,))},
    "/v2/deployables": {
        "GET": Op(v2_inventory.list_deployables, 200, r.DEPLOYABLES, query=v2.LIST_QUERY)},
    "/v2/deployables/{uuid}": {
        "GET": Op(v2_inventory.show_deployable, 200, r.DEPLOYABLE, query=v2.NO_QUERY)},
    "/v2/deployables/{uuid}/program": {
        "GET": Op(program.show_program, 200, r.DEPLOYABLE_PROGRAM, query=v2.NO_QUERY),
        "PATCH": Op(program.program_deployable, 202, r.DEPLOYABLE_PROGRAM, query=v2.NO_QUERY,
                    body=v2.PROGRAM_PATCH, errors=(409, 503), headers=("Location",))},
    "/v2/attributes": {
        "GET": Op(v2_inventory.list_attributes, 200, r.ATTRIBUTES, query=v2.ATTRIBUTE_LIST_QUERY),
        "POST": Op(v2_inventory.create_attribute, 201, r.ATTRIBUTE, query=v2.NO_QUERY,
                   body=v2.ATTRIBUTE, wrapper="attribute")},
    "/v2/attributes/{uuid}": {
        "GET": Op(v2_inventory.show_attribute, 200, r.ATTRIBUTE, query=v2.NO_QUERY),
        "DELETE": Op(v2_inventory.delete_attribute, 204, None, query=v2.NO_QUERY)},
    "/v2/device_profiles": {
        "GET": Op(device_profiles.list_profiles, 200, r.DEVICE_PROFILES,
                  query=v2.PROFILE_LIST_QUERY),
        "POST": Op(device_profiles.create_profile, 201, r.DEVICE_PROFILE, query=v2.NO_QUERY,
                   body=v2.ONE_PROFILE, errors=(409,)),
        "DELETE": Op(device_profiles.delete_profiles, 204, None, query=v2.PROFILE_DELETE_QUERY,
                     errors=(404, 409))},
    "/v2/device_profiles/{name_or_uuid}": {
        "GET": Op(device_profiles.show_profile, 200, r.DEVICE_PROFILE_SHOW, query=v2.NO_QUERY),
        "DELETE": Op(device_profiles.delete_profile, 204, None, query=v2.NO_QUERY, errors=(409,))},
    "/v2/device_profiles/{name_or_uuid}/availability": {
        "GET": Op(device_profiles.availability, 200, r.AVAILABILITY,
                  query=v2.AVAILABILITY_QUERY, errors=(404,))},
    "/v2/accelerator_requests": {
        "GET": Op(arqs.list_arqs, 200, r.ARQS, query=v2.ARQ_LIST_QUERY, errors=(423,)),
        "POST": Op(arqs.create_arqs, 201, r.ARQS, query=v2.NO_QUERY, body=v2.ARQ_CREATE,
                   errors=(404,)),
        "PATCH": Op(arqs.update_arqs, 202, None, query=v2.NO_QUERY, body=v2.ARQ_PATCH,
                    errors=(404, 409, 502, 503)),
        "DELETE": Op(arqs.delete_arqs, 204, None, query=v2.ARQ_DELETE_QUERY, errors=(404,))},
    "/v2/accelerator_requests/dry_run": {
        "POST": Op(arqs.dry_run, 200, r.ARQ_DRY_RUN, query=v2.NO_QUERY,
                   body=v2.ARQ_DRY_RUN, errors=(404,))},
    "/v2/accelerator_requests/{uuid}": {
        "GET": Op(arqs.show_arq, 200, r.ARQ, query=v2.NO_QUERY),
        "PATCH": Op(arqs.update_arqs, 202, None, query=v2.NO_QUERY, body=v2.ARQ_PATCH,
                    errors=(409, 502, 503)),
        "DELETE": Op(arqs.delete_arq, 204, None, query=v2.NO_QUERY)},
    "/v2/accelerator_requests/{uuid}/hot_plug": {
        "GET": Op(hot_plug.show, 200, r.HOT_PLUG, query=v2.NO_QUERY),
        "PUT": Op(hot_plug.attach, 200, r.HOT_PLUG, query=v2.NO_QUERY, body=v2.HOT_PLUG,
                  errors=(403, 404, 409, 502, 503)),
        "DELETE": Op(hot_plug.detach, 200, r.HOT_PLUG, query=v2.NO_QUERY,
                     errors=(404, 409, 502, 503))},
    **{path: {"GET": Op(handler, 200, r.TEXT, errors=(304,), headers=("ETag",),
                        media_type=ui.MEDIA_TYPES[name])}
       for path, (handler, name) in _UI.items()},
}

MOUNT_PREFIX = "/accelerator"
# environ key: the route (its template in OPERATIONS) of the request, once routed
ENV_ROUTE = "acceld.route"
# the routes anyone may read (version discovery, the API description, the fleet view's
# files): no policy rule
PUBLIC_ROUTES = frozenset({("/", "GET"), ("/v1", "GET"), ("/v2", "GET"),
                           ("/openapi.json", "GET"), *((path, "GET") for path in _UI)})

# The methods of Cyborg's v2 controllers (pecan RestControllers), which decide what a
# request no route serves gets there: below a collection, a GET or a method the controller
# has is a 404 and any other method a 405; on the collection itself, a method the
# controller has with no route here (a DELETE of attributes without a uuid) is a 400.
CYBORG_CONTROLLERS: dict[str, frozenset[str]] = {
    "devices": frozenset({"GET"}),
    "deployables": frozenset({"GET"}),
    "attributes": frozenset({"GET", "POST", "DELETE"}),
    "device_profiles": frozenset({"GET", "POST", "DELETE"}),
    "accelerator_requests": frozenset({"GET", "POST", "PATCH", "DELETE"}),
}


# The first segments of the v2 collections; Cyborg's root controller serves them without
# the "/v2" (e.g. "/devices"), and the upstream CLI relies on that when it is pointed at
# the unversioned endpoint.
V2_COLLECTIONS = frozenset(path.split("/")[2] for path in OPERATIONS
                           if path.startswith("/v2/"))


def _normalise_path(environ: dict[str, Any]) -> None:
    """Strip devstack's "/accelerator" mount and put a missing "/v2" back."""
    path = environ.get("PATH_INFO", "")
    if path.startswith("/v2/"):     # what clients send: nothing to do
        return
    if path == MOUNT_PREFIX or path.startswith(MOUNT_PREFIX + "/"):
        path = path[len(MOUNT_PREFIX):] or "/"
        environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + MOUNT_PREFIX
    first = path.split("/", 2)[1] if path.startswith("/") and len(path) > 1 else ""
    if first in V2_COLLECTIONS:
        path = "/v2" + path
    environ["PATH_INFO"] = path


def is_v2(path: str) -> bool:
    """Whether ``path`` (normalised) is of the v2 API."""
    return path == "/v2" or path.startswith("/v2/")


def _answer_key(environ: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a GET's answer depends on (``listcache.Replies``); None for a public route or
    another method."""
    ctx = environ.get("acceld.context")
    if ctx is None or environ.get("REQUEST_METHOD") != "GET":
        return None
    return (environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""),
            environ.get("HTTP_OPENSTACK_API_VERSION"), util.link_inputs(environ),
            util.creds_key(ctx))


def _stored_answer(environ: dict[str, Any],
                   key: tuple[Any, ...]) -> tuple[str, list[tuple[str, str]], bytes] | None:
    """The stored answer for ``key`` when its handler's policy rules still allow this
    caller and its generation is unchanged; else None (the request goes the whole way)."""
    st = environ["acceld.app"]
    entry = st.answers.get(key)
    if (entry is None or not all(util.allowed(environ, rule) for rule in entry[2])
            or st.db.generation(entry[0]) != entry[1]):
        return None
    return entry[3:]


def _keep_answer(environ: dict[str, Any], key: tuple[Any, ...], status: str,
                 headers: list[tuple[str, str]], body: bytes) -> None:
    """File a 200 answer whose body came from ListCache (its handler said so)."""
    generation = environ.get(listcache.ENV_GENERATION)
    rules = environ.get(util.ENV_RULES)
    if generation is not None and rules:
        environ["acceld.app"].answers.put(key, (*generation, rules, status, headers.copy(),
                                                body))


class Router:
    """Templates are tried in table order among those with the request's first two
    segments (each starts with two literal ones); a ``{name}`` segment matches any one
    non-empty segment. Each route is authorized with the policy rule documenting it."""

    def __init__(self) -> None:
        self._static = {path: path for path in OPERATIONS if "{" not in path}
        self._templates: dict[tuple[str, ...], list[tuple[str, list[str]]]] = {}
        for path in OPERATIONS:
            if "{" in path:
                segments = path.strip("/").split("/")
                self._templates.setdefault(tuple(segments[:2]), []).append((path, segments))
        self._rules: dict[tuple[str, str], str] = {}
        for rule in policies.ROUTE_RULES:
            for op in rule.operations:
                found = self.match(op["path"])
                if found is None:
                    raise RuntimeError(f"policy rule {rule.name} documents "
                                       f"{op['method']} {op['path']}, which no route serves")
                self._rules[found[0], op["method"]] = rule.name
        # fail closed: a route that is neither public nor documented by a rule is an error
        unguarded = {(path, method) for path, methods in OPERATIONS.items()
                     for method in methods} - set(self._rules) - PUBLIC_ROUTES
        if unguarded:
            raise RuntimeError(f"routes without a policy rule: {sorted(unguarded)}")

    def match(self, path: str) -> tuple[str, dict[str, str]] | None:
        """(route path, parameters) for a request path; one trailing slash is allowed."""
        if path.endswith("/") and path != "/":
            path = path[:-1]
        if path in self._static:
            return path, {}
        parts = path.strip("/").split("/")
        for route, segments in self._templates.get(tuple(parts[:2]), ()):
            if len(segments) != len(parts):
                continue
            pairs = list(zip(segments, parts, strict=True))
            if all(part if seg[0] == "{" else part == seg for seg, part in pairs):
                return route, {seg[1:-1]: part for seg, part in pairs if seg[0] == "{"}
        return None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        """The answer's WSGI iterable (a streamed body is never stored)."""
        # every answer carries the request id the pipeline's head gave the request
        req_id = environ.get(request_id.ENV_REQUEST_ID)
        tail = [(request_id.HEADER, req_id)] if req_id else []
        key = _answer_key(environ)
        if key is not None:
            stored = _stored_answer(environ, key)
            if stored is not None:
                self._note_route(environ)
                start_response(stored[0], stored[1] + tail)
                return [stored[2]]
        _normalise_path(environ)
        req = webob.Request(environ)
        v2 = is_v2(environ["PATH_INFO"])
        try:
            if v2:
                environ[microversion.ENV_KEY] = microversion.negotiate(
                    environ.get("HTTP_OPENSTACK_API_VERSION"))
            resp = self._dispatch(req)
        except Exception as exc:  # noqa: BLE001 - the one place errors become responses
            resp = errors.from_exception(environ, exc)
        headers = resp.headerlist
        if v2:
            if resp.status_int >= 400:
                # an error may carry the range headers already: one copy of each
                names = microversion.HEADER_NAMES
                headers = [h for h in headers if h[0].lower() not in names]
            headers = headers + microversion.header_items(environ.get(microversion.ENV_KEY))
            if key is not None and resp.status_int == 200 and isinstance(resp.body, bytes):
                _keep_answer(environ, key, resp.status, headers, resp.body)
        start_response(resp.status, headers + tail)
        return resp.iterable(environ)

    def _note_route(self, environ: dict[str, Any]) -> None:
        """Put the route of a stored answer's request in ``environ`` (as dispatching
        does), for the request metrics."""
        probe = {"PATH_INFO": environ.get("PATH_INFO", "")}
        _normalise_path(probe)
        found = self.match(util.path_text(probe) or "/")
        if found is not None:
            environ[ENV_ROUTE] = found[0]

    def _dispatch(self, req: webob.Request) -> Reply:
        # PATH_INFO (latin-1 code points) as UTF-8 text; 400 for other bytes or a NUL
        found = self.match(util.path_text(req.environ) or "/")
        if found is not None:
            req.environ[ENV_ROUTE] = found[0]
        method = req.environ["REQUEST_METHOD"]
        if method == "HEAD":
            method = "GET"
        if found is None or method not in OPERATIONS[found[0]]:
            raise _unrouted(req, method, None if found is None else OPERATIONS[found[0]])
        path, match = found
        if (path, method) not in PUBLIC_ROUTES:
            util.authorize(req, self._rules[path, method])
        if "uuid" in match:  # one spelling of a UUID everywhere below the router
            match["uuid"] = util.canonical_uuid(match["uuid"])
        op = OPERATIONS[path][method]
        return op.handler(req, **match, **_inputs(req, path, op, match))


def _inputs(req: webob.Request, path: str, op: Op, match: dict[str, str]) -> dict[str, Any]:
    """The path values checked, then the query and the body validated by ``op``'s schemas:
    the handler's ``query`` and ``body`` arguments (see ``Op``)."""
    for name, value in match.items():
        allowed = PATH_PARAMETERS[name].get("enum")
        if allowed is not None and value not in allowed:
            raise errors.HTTPError(404, f"Unknown {path.split('/')[2].removesuffix('s')} "
                                   f"sub-resource {value!r}.", "acceld.not_found")
    out: dict[str, Any] = {}
    if op.query is not None:
        query = util.query(req, op.query)
        if "properties" in op.query:
            out["query"] = query
    if op.body is not None and op.body_optional and not util.read_body(req):
        out["body"] = {}
    elif op.body is not None:
        body = util.json_body(req)
        if op.wrapper is not None and isinstance(body, dict) and list(body) == [op.wrapper]:
            body = body[op.wrapper]
        util.validate(body, op.body, "body")
        out["body"] = body
    return out


def _unrouted(req: webob.Request, method: str,
              methods: dict[str, Op] | None) -> errors.HTTPError:
    """The error for a request no route serves: 404, or 405 for another method of a known
    path; below ``/v2`` what Cyborg's controllers answer there."""
    parts = req.environ.get("PATH_INFO", "").strip("/").split("/")
    cyborg = (CYBORG_CONTROLLERS.get(parts[1]) if len(parts) > 1 and parts[0] == "v2"
              else None)
    if cyborg is not None and len(parts) > 2:             # a 404 or a 405 there
        methods = None if method == "GET" or method in cyborg else methods or {}
    elif cyborg is not None and method in cyborg:
        return errors.invalid('Missing argument: "uuid"')
    if methods is None:
        return errors.HTTPError(404, f"The resource {req.path_info} could not be found.",
                                "acceld.not_found")
    allow = ", ".join(sorted(methods))
    return errors.HTTPError(405, f"Method {req.method} is not allowed on {req.path_info}"
                            + (f"; allowed: {allow}." if allow else "."),
                            "acceld.method_not_allowed", {"Allow": allow})

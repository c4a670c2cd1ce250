"""The OpenAPI 3.1 description of the API, generated from ``router.OPERATIONS`` and the
schemas. After changing either: ``.venv/bin/python -m acceld.api.openapi > docs/openapi.json``.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import sys
from typing import Any

import acceld
from acceld.api import auth, microversion, request_id, router
from acceld.api.router import OPERATIONS, PATH_PARAMETERS, Op
from acceld.api.schemas import responses as r

OPENAPI_VERSION = "3.1.0"
JSON = "application/json"


_REASONS = {
    200: "OK", 201: "Created", 202: "Accepted", 204: "No Content",
    304: "Not Modified: If-None-Match names the current ETag (no body).",
    400: "The request is invalid: the detail names the field (a query parameter, a body "
         "field, a path segment).",
    401: "No valid token (noauth: X-Auth-Token is neither 'admin' nor '<user>:<project>').",
    403: "The policy, or the service-token requirement, does not allow it.",
    404: "No such resource (or one the caller's project cannot see).",
    406: "The OpenStack-API-Version asked for cannot be served (or a change that needs a "
         "later microversion).",
    409: "The resource's state does not allow it (the detail says why).",
    413: "The request body is larger than [api] max_request_body_size.",
    415: "The body is not application/json.",
    423: "An ARQ of the instance is still binding (bind_state=resolved).",
    428: "Neither If-Match nor 'revision' given.",
    502: "The driver's step on the host failed.",
    503: "The database, the conductor or the agent is unreachable; try again later.",
}


def _error_statuses(path: str, op: Op) -> list[int]:
    """The error statuses of an operation: those of every route of its kind, and its own."""
    found = set(op.errors)
    if op.query is not None or op.body is not None or "{" in path:
        found.add(400)
    if op.body is not None:
        found.update((413, 415))
    if "{" in path:
        found.add(404)
    if not auth.is_public({"PATH_INFO": path}):
        found.update((401, 403, 503))
    if router.is_v2(path):
        found.add(406)
    return sorted(found)


def _component_schemas() -> dict[str, dict[str, Any]]:
    """Each module-level schema of ``responses`` under its name in CamelCase
    (``DEVICE_PROFILES``: DeviceProfiles)."""
    return {"".join(word.capitalize() for word in name.split("_")): value
            for name, value in vars(r).items()
            if name.isupper() and isinstance(value, dict)}


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _parameters(path: str, op: Op) -> list[dict[str, Any]]:
    params = [{"name": name, "in": "path", "required": True, "schema": PATH_PARAMETERS[name]}
              for name in re.findall(r"{(\w+)}", path)]
    if op.query is not None:
        required = op.query.get("required", [])
        params += [{"name": name, "in": "query", "required": name in required,
                    "schema": schema}
                   for name, schema in op.query.get("properties", {}).items()]
    if router.is_v2(path):
        params.append(_ref("parameters", "Microversion"))
    return params


def _request_body(op: Op) -> dict[str, Any]:
    schema = op.body
    if op.wrapper is not None:
        schema = {"anyOf": [schema, {"type": "object", "properties": {op.wrapper: schema},
                                     "required": [op.wrapper],
                                     "additionalProperties": False}]}
    return {"required": not op.body_optional, "content": {JSON: {"schema": schema}}}


def _headers(path: str, names: tuple[str, ...] = ()) -> dict[str, Any]:
    out = {request_id.HEADER: _ref("headers", "RequestId")}
    if router.is_v2(path):
        out.update((name, _ref("headers", name)) for name in _MICROVERSION_HEADERS)
    out.update((name, _ref("headers", name)) for name in names)
    return out


def _responses(path: str, op: Op, components: dict[int, str]) -> dict[str, Any]:
    success: dict[str, Any] = {"description": _REASONS[op.status],
                               "headers": _headers(path, op.headers)}
    if op.response is not None:
        name = components.get(id(op.response))
        schema = _ref("schemas", name) if name else op.response
        success["content"] = {op.media_type: {"schema": schema}}
    out = {str(op.status): success}
    error = "V2Error" if router.is_v2(path) else "Error"
    for status in _error_statuses(path, op):
        out[str(status)] = dict(_ref("responses", error), description=_REASONS[status])
    if "304" in out:    # a revalidated file: no body, the same ETag
        out["304"] = {"description": _REASONS[304], "headers": _headers(path, op.headers)}
    return out


def _operation(path: str, method: str, op: Op, components: dict[int, str]) -> dict[str, Any]:
    handler = op.handler
    out: dict[str, Any] = {
        "operationId": re.sub(r"\W+", "_", f"{method} {path}").strip("_").lower(),
        "summary": handler.__name__.replace("_", " "),
        "description": inspect.getdoc(handler) or "",
        "tags": [handler.__module__.rsplit(".", 1)[-1]],
    }
    params = _parameters(path, op)
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = _request_body(op)
    out["responses"] = _responses(path, op, components)
    if auth.is_public({"PATH_INFO": path}):
        out["security"] = []
    return out


_MICROVERSION_HEADERS = (microversion.HEADER, *microversion.headers(None))


def _components() -> dict[str, Any]:
    versions = [f"{microversion.SERVICE_TYPE} {v}" for v in microversion.VERSIONS]
    string = {"type": "string"}
    return {
        "schemas": _component_schemas(),
        "responses": {name: {"description": "An error", "headers": _headers(path),
                             "content": {JSON: {"schema": _ref("schemas", "Error")}}}
                      for name, path in (("Error", "/"), ("V2Error", "/v2"))},
        "parameters": {
            "Microversion": {
                "name": microversion.HEADER, "in": "header", "required": False,
                "description": f"The microversion ({microversion.MIN_VERSION} when not "
                               "given).",
                "schema": {"enum": [*versions, f"{microversion.SERVICE_TYPE} latest"]}},
        },
        "headers": {
            "RequestId": {"description": "The request's id (also in error bodies).",
                          "schema": string},
            "OpenStack-API-Version": {"description": "The microversion served (absent when "
                                      "none could be).", "schema": string},
            "OpenStack-API-Minimum-Version": {"required": True, "schema": string},
            "OpenStack-API-Maximum-Version": {"required": True, "schema": string},
            "Vary": {"schema": string},
            "Location": {"description": "The URL of what was created or queued.",
                         "required": True, "schema": string},
            "ETag": {"description": "An accelerator's revision, for If-Match; a fleet view "
                             "file's digest, for If-None-Match.",
                     "required": True, "schema": string},
        },
        "securitySchemes": {
            "token": {"type": "apiKey", "in": "header", "name": "X-Auth-Token",
                      "description": "[api] auth_strategy = keystone: a Keystone token. "
                                     "noauth: 'admin' (also no token at all) or "
                                     "'<user>:<project>'."},
            "serviceToken": {"type": "apiKey", "in": "header", "name": "X-Service-Token",
                             "description": "A service token (its roles must include "
                                            "'service'): ARQ bind and unbind, deleting "
                                            "an instance's ARQs."},
        },
    }


def document() -> dict[str, Any]:
    """The OpenAPI document (a fresh dict)."""
    components = {id(value): name for name, value in _component_schemas().items()}
    paths = {path: {method.lower(): _operation(path, method, op, components)
                    for method, op in ops.items()} for path, ops in OPERATIONS.items()}
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "acceld",
            "version": acceld.__version__,
            "summary": "The acceld API: v1 (accelerators, operator endpoints) and the "
                       "Cyborg-compatible v2.",
            "description": "Generated by acceld.api.openapi from the route table and the "
                           "request schemas; docs/api-v1.md and docs/api-v2.md describe "
                           "the behaviour. Every error body is "
                           '{"errors": [{"status", "code", "title", "detail", '
                           '"request_id"}]}. A leading /accelerator on any path is '
                           "accepted (devstack's mount).",
        },
        "security": [{}, {"token": []}, {"token": [], "serviceToken": []}],
        "paths": paths,
        "components": _components(),
    }


def text() -> str:
    """:func:`document` as docs/openapi.json holds it."""
    return json.dumps(document(), indent=2) + "\n"


@functools.cache
def body() -> bytes:
    """What ``GET /openapi.json`` answers (built once per process)."""
    return text().encode("utf-8")


if __name__ == "__main__":
    sys.stdout.write(text())

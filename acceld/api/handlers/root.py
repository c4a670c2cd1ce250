"""Version discovery (public)."""

from __future__ import annotations

import webob

from acceld.api import util

V1 = {"id": "v1", "status": "CURRENT"}


def _version(req: webob.Request) -> dict[str, object]:
    return dict(V1, links=[{"rel": "self", "href": f"{util.base_url(req)}/v1/"}])


def versions(req: webob.Request) -> webob.Response:
    """GET / -> 200 {"versions": [...]} without authentication."""
    return util.json_response({"versions": [_version(req)]})


def v1(req: webob.Request) -> webob.Response:
    """GET /v1 -> 200 {"version": {...}}."""
    return util.json_response({"version": _version(req)})

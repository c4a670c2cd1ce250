"""Public documents: version discovery (Cyborg's document at ``/``, the v2 version at
``/v2``) and the OpenAPI description at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

import webob

from acceld.api import microversion, util

NAME = "OpenStack Cyborg API"
DESCRIPTION = ("Cyborg is the OpenStack project for lifecycle management of hardware "
               "accelerators, such as GPUs,FPGAs, AI chips, security accelerators, etc.")
V1 = {"id": "v1", "status": "SUPPORTED"}


def _v1(req: webob.Request) -> dict[str, Any]:
    return dict(V1, links=[{"rel": "self", "href": f"{util.base_url(req)}/v1/"}])


def _v2(version_id: str, href: str) -> dict[str, Any]:
    return {"id": version_id, "status": "CURRENT",
            "min_version": str(microversion.MIN_VERSION),
            "max_version": str(microversion.MAX_VERSION),
            "links": [{"href": href, "rel": "self"}]}


def versions(req: webob.Request) -> util.Reply:
    """GET / -> 200 Cyborg's version document (plus acceld's v1) without authentication.

    As in Cyborg the v2 link is the request's host URL plus the ``/accelerator`` segment
    (served here too: the router strips it).
    """
    v2 = _v2("v2", f"{req.host_url}/accelerator/v2")
    return util.json_response({"name": NAME, "description": DESCRIPTION,
                               "versions": [v2, _v1(req)], "default_version": v2})


def v1(req: webob.Request) -> util.Reply:
    """GET /v1 -> 200 {"version": {...}}."""
    return util.json_response({"version": _v1(req)})


def v2(req: webob.Request) -> util.Reply:
    """GET /v2 -> 200 the bare v2 version object (not wrapped, as in Cyborg); 400 for a
    query parameter (it takes none)."""
    return util.json_response(_v2("v2.0", f"{util.public_url(req)}/accelerator/v2/"))


def openapi_document(req: webob.Request) -> util.Reply:
    """GET /openapi.json -> 200 the OpenAPI 3.1 description of this API
    (``acceld.api.openapi``; docs/openapi.json holds the same)."""
    # imported here: the document is generated from the route table, which imports this
    from acceld.api import openapi
    return util.body_response(openapi.body())

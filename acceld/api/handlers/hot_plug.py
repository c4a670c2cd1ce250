"""Hot plug, an acceld extension of the v2 API (docs/hot-plug.md): an ARQ's device
attached to, and detached from, a running instance. Nova does not know it; Nova's own
binds (PATCH /v2/accelerator_requests) are untouched. Non-admins reach only their
project's ARQs, and (through Nova) only their project's instances."""

from __future__ import annotations

from typing import Any

import webob

from acceld.api import util
from acceld.objects import arqs as arq_objects


def show(req: webob.Request, uuid: str) -> util.Reply:
    """GET /v2/accelerator_requests/{uuid}/hot_plug -> 200 the ARQ and its ``hot_plug``."""
    view = arq_objects.get_hot_plug(util.state(req).db, uuid,
                                    project_id=util.project_scope(req))
    return util.json_response(util.linked(req, "accelerator_requests", view))


def attach(req: webob.Request, uuid: str, body: dict[str, Any]) -> util.Reply:
    """PUT .../hot_plug {"instance_uuid"} -> 200 attached; 404 no such ARQ or instance;
    409 the ARQ is not Initial/Unbound or nothing on the instance's host fits it."""
    instance = util.canonical_uuid(body["instance_uuid"])
    view = util.state(req).conductor.hot_attach(uuid, instance, util.project_scope(req))
    return util.json_response(util.linked(req, "accelerator_requests", view))


def detach(req: webob.Request, uuid: str) -> util.Reply:
    """DELETE .../hot_plug -> 200 with ``hot_plug`` Initial (released and unbound) or
    Detaching (asked; the guest has not released the device yet: ask again)."""
    view = util.state(req).conductor.hot_detach(uuid, util.project_scope(req))
    return util.json_response(util.linked(req, "accelerator_requests", view))

"""Cyborg v2 inventory: ``/v2/devices``, ``/v2/deployables``, ``/v2/attributes``;
contract: shared/docs/cyborg-v2-contract.md 1.3-1.4 (summary in docs/api-v2.md)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import webob

from acceld.api import listcache, listing, microversion, util
from acceld.objects import v2_inventory as inventory

STATUS_VERSION = microversion.Version(2, 3)


def _cached_list(req: webob.Request, q: dict[str, str], variant: Any, key_name: str,
                 found: Callable[[], listing.Listing], present: listing.Present) -> util.Reply:
    """A list answer whose body, unless streamed, is kept (``listcache``) while the
    inventory generation is unchanged, under everything else the bytes depend on: the
    path, the query, ``variant`` (what the microversion changes) and the links' URL."""
    st = util.state(req)
    env = req.environ
    public = st.api.public_endpoint or util.link_inputs(env)
    key = (env["PATH_INFO"].rstrip("/"), tuple(sorted(q.items())), variant, public)
    generation = st.db.generation(inventory.GENERATION)
    if generation is not None:      # the router may keep the whole answer (Replies)
        env[listcache.ENV_GENERATION] = (inventory.GENERATION, generation)
    body = st.lists.get(key, generation)
    if body is not None:
        return util.body_response(body)
    reply = listing.respond(req, key_name, found(), present)
    if isinstance(reply.body, bytes):
        st.lists.put(key, generation, reply.body)
    return reply


# -- devices ----------------------------------------------------------------------------------

def _device(req: webob.Request, record: dict[str, Any]) -> dict[str, Any]:
    out = util.linked(req, "devices", record)
    if microversion.of(req.environ) < STATUS_VERSION:
        del out["status"]
    return out


def list_devices(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v2/devices[?type=&vendor=&hostname=][&limit=&marker=] -> 200 {"devices":
    [...]} (``acceld.api.listing``)."""
    limit, marker = listing.page_params(req, query)
    found = functools.partial(inventory.list_devices, util.state(req).db,
                              type=query.get("type"), vendor=query.get("vendor"),
                              hostname=query.get("hostname"), limit=limit, marker=marker)
    return _cached_list(req, query, microversion.of(req.environ) >= STATUS_VERSION, "devices",
                        found, _device)


def show_device(req: webob.Request, uuid: str) -> util.Reply:
    """GET /v2/devices/{uuid} -> 200 the device; 404."""
    return util.json_response(_device(req, inventory.get_device(util.state(req).db, uuid)))


def _set_status(req: webob.Request, uuid: str, status: str) -> util.Reply:
    st = util.state(req)
    host = inventory.set_device_status(st.db, uuid, status)
    if host:  # reserved follows the status: the conductor syncs that host's providers
        st.conductor.host_changed(host)
    return util.empty_response(200)


def enable_device(req: webob.Request, uuid: str) -> util.Reply:
    """POST /v2/devices/{uuid}/enable -> 200 no body (any microversion); 404."""
    return _set_status(req, uuid, "enabled")


def disable_device(req: webob.Request, uuid: str) -> util.Reply:
    """POST /v2/devices/{uuid}/disable -> 200 no body, status maintaining; 404."""
    return _set_status(req, uuid, "maintaining")


# -- deployables ------------------------------------------------------------------------------

def _deployable(req: webob.Request, record: dict[str, Any]) -> dict[str, Any]:
    return util.linked(req, "deployables", record, bookmark=True)


def list_deployables(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v2/deployables[?limit=&marker=] -> 200 {"deployables": [...]}."""
    limit, marker = listing.page_params(req, query)
    found = functools.partial(inventory.list_deployables, util.state(req).db, limit=limit,
                              marker=marker)
    return _cached_list(req, query, None, "deployables", found, _deployable)


def show_deployable(req: webob.Request, uuid: str) -> util.Reply:
    """GET /v2/deployables/{uuid} -> 200 the deployable; 400 not a UUID; 404."""
    record = inventory.get_deployable(util.state(req).db, util.require_uuid(uuid))
    return util.json_response(_deployable(req, record))


# -- attributes -------------------------------------------------------------------------------

def _attribute(req: webob.Request, record: dict[str, Any]) -> dict[str, Any]:
    return util.linked(req, "attributes", record)


def list_attributes(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v2/attributes[?deployable_id=<int>&key=][&limit=&marker=] -> 200
    {"attributes": [...]}."""
    limit, marker = listing.page_params(req, query)
    deployable_id = int(query["deployable_id"]) if "deployable_id" in query else None
    found = inventory.list_attributes(util.state(req).db, deployable_id=deployable_id,
                                      key=query.get("key"), limit=limit, marker=marker)
    return listing.respond(req, "attributes", found, _attribute)


def show_attribute(req: webob.Request, uuid: str) -> util.Reply:
    """GET /v2/attributes/{uuid} -> 200 the attribute; 400 not a UUID; 404."""
    return util.json_response(_attribute(req, inventory.get_attribute(
        util.state(req).db, util.require_uuid(uuid))))


def create_attribute(req: webob.Request, body: dict[str, Any]) -> util.Reply:
    """POST /v2/attributes {"deployable_id", "key", "value"} (bare, or wrapped in
    "attribute" as openstacksdk sends it; other fields ignored, numbers stored as text,
    as in Cyborg) -> 201 the attribute; 400 unknown deployable."""
    record = inventory.create_attribute(util.state(req).db, int(body["deployable_id"]),
                                        util.text(body["key"]), util.text(body["value"]))
    return util.json_response(_attribute(req, record), status=201)


def delete_attribute(req: webob.Request, uuid: str) -> util.Reply:
    """DELETE /v2/attributes/{uuid} -> 204; 404."""
    inventory.delete_attribute(util.state(req).db, uuid)
    return util.empty_response(204)

"""Cyborg v2 device profiles: ``/v2/device_profiles`` (contract: cyborg-v2-contract.md
1.3-1.4). Where Cyborg answers a client mistake with 500 acceld answers 400 or 409."""

from __future__ import annotations

from typing import Any

import webob

from acceld import uuids
from acceld.api import errors, listing, microversion, util
from acceld.conductor import availability as fit
from acceld.objects import availability as fleet_rows
from acceld.objects import device_profiles

SHOW_BY_NAME_VERSION = microversion.Version(2, 2)


def _present(req: webob.Request, record: dict[str, Any]) -> dict[str, Any]:
    return util.linked(req, "device_profiles", record)


def _names(value: str) -> list[str]:
    return [n for n in value.split(",") if n]


def list_profiles(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v2/device_profiles[?name=a,b][&limit=&marker=] -> 200 {"device_profiles":
    [...]} (``acceld.api.listing``)."""
    limit, marker = listing.page_params(req, query)
    names = _names(query["name"]) if "name" in query else None
    found = device_profiles.list_profiles(util.state(req).db, names=names, limit=limit,
                                          marker=marker)
    return listing.respond(req, "device_profiles", found, _present)


def show_profile(req: webob.Request, name_or_uuid: str) -> util.Reply:
    """GET /v2/device_profiles/{uuid} -> 200 {"device_profile": {...}}; a name needs 2.2
    (406 below); 404.

    Cyborg renders this one response's dates with str() (a space, and "None" for a null
    updated_at); acceld uses ISO-8601 here as everywhere else, on purpose.
    """
    db = util.state(req).db
    uuid = uuids.canonical(name_or_uuid)
    if uuid is not None:
        record = device_profiles.get(db, uuid=uuid)
    elif microversion.of(req.environ) >= SHOW_BY_NAME_VERSION:
        record = device_profiles.get(db, name=name_or_uuid)
    else:
        raise errors.HTTPError(406, f"Showing a device profile by name needs microversion "
                               f"{SHOW_BY_NAME_VERSION} or later; {name_or_uuid!r} is not "
                               "a UUID.", "acceld.microversion")
    return util.json_response({"device_profile": _present(req, record)})


def create_profile(req: webob.Request, body: list[dict[str, Any]]) -> util.Reply:
    """POST /v2/device_profiles [{"name", "groups", "description"?, "uuid"?}] -> 201 the
    bare profile; 400 invalid (one profile per request, group rules); 409 name taken."""
    profile = body[0]
    uuid = util.canonical_uuid(profile["uuid"]) if profile.get("uuid") else None
    description = profile.get("description")
    st = util.state(req)
    record = device_profiles.create(st.db, profile["name"], profile["groups"],
                                    None if description is None else util.text(description),
                                    uuid, st.api.max_arqs_per_profile)
    return util.json_response(_present(req, record), status=201)


def _delete(req: webob.Request, value: str) -> util.Reply:
    db = util.state(req).db
    uuid = uuids.canonical(value)
    if uuid is not None:
        device_profiles.delete_by_uuid(db, uuid)
    else:       # as Cyborg: an empty name is a profile that does not exist
        device_profiles.delete_by_names(db, _names(value) or [value])
    return util.empty_response(204)


def delete_profiles(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """DELETE /v2/device_profiles?value=<uuid>|n1,n2 -> 204; 404 for any missing one
    (nothing deleted); 409 while accelerator requests use one."""
    return _delete(req, query["value"])


def delete_profile(req: webob.Request, name_or_uuid: str) -> util.Reply:
    """DELETE /v2/device_profiles/{uuid}|{n1,n2} -> 204; 404; 409 (as above)."""
    return _delete(req, name_or_uuid)


def _by_name_or_uuid(req: webob.Request, value: str) -> dict[str, Any]:
    uuid = uuids.canonical(value)
    db = util.state(req).db
    return device_profiles.get(db, uuid=uuid) if uuid is not None else \
        device_profiles.get(db, name=value)


def availability(req: webob.Request, name_or_uuid: str, query: dict[str, str]) -> util.Reply:
    """GET /v2/device_profiles/{name_or_uuid}/availability[?group_policy=none|isolate]
    -> 200 how many instances of the profile fit now, where, and why not elsewhere
    (acceld extension, any microversion; a name or a uuid); 404 no such profile."""
    profile = _by_name_or_uuid(req, name_or_uuid)
    app = util.state(req)
    rows = fleet_rows.read_fleet(app.db, app.conf.conductor.service_down_time)
    return util.json_response(fit.availability(profile, rows,
                                               query.get("group_policy", "none")))

"""The seed's v1 accelerators API (``/v1/accelerators``); contract in docs/api-v1.md."""

from __future__ import annotations

from typing import Any

import webob

from acceld import limits
from acceld.api import errors, listing, util
from acceld.objects import accelerators


def _present(req: webob.Request, record: dict[str, Any]) -> dict[str, Any]:
    return dict(record, links=[{"rel": "self", "href":
                                f"{util.base_url(req)}/v1/accelerators/{record['uuid']}"}])


def _etag(record: dict[str, Any]) -> dict[str, str]:
    return {"ETag": f'"{record["revision"]}"'}


def list_accelerators(req: webob.Request, query: dict[str, str]) -> util.Reply:
    """GET /v1/accelerators[?host=&state=&device_type=&instance_uuid=][&limit=&marker=]
    -> 200 {"accelerator": [...]} (``acceld.api.listing``); 400 on an unknown query."""
    limit, marker = listing.page_params(req, query)
    instance = query.get("instance_uuid")
    found = accelerators.list_accelerators(
        util.state(req).db, host=query.get("host"), state=query.get("state"),
        device_type=query.get("device_type"),
        instance_uuid=None if instance is None else util.canonical_uuid(instance),
        limit=limit, marker=marker, viewer=util.project_scope(req))
    return listing.respond(req, "accelerator", found, _present)


def show_accelerator(req: webob.Request, uuid: str) -> util.Reply:
    """GET /v1/accelerators/{uuid} -> 200 with an ETag; 404 when missing."""
    record = accelerators.get_accelerator(util.state(req).db, uuid, util.project_scope(req))
    return util.json_response(_present(req, record), headers=_etag(record))


def create_accelerator(req: webob.Request, body: dict[str, Any]) -> util.Reply:
    """POST /v1/accelerators {"name", "uuid"?} -> 201 + Location; 409 on a duplicate."""
    uuid = util.canonical_uuid(body["uuid"]) if "uuid" in body else None
    record = util.state(req).conductor.create_accelerator(body["name"], uuid)
    return util.empty_response(201, {
        "Location": f"{util.base_url(req)}/v1/accelerators/{record['uuid']}"})


def _expected_revision(req: webob.Request, body: dict[str, Any]) -> int:
    header = req.headers.get("If-Match")
    if header is not None:
        try:
            from_header = int(header.strip().removeprefix("W/").strip('"'))
        except ValueError:
            from_header = -1
        if not 0 <= from_header <= limits.INT_MAX:     # no revision is outside
            raise errors.invalid("If-Match must be an ETag from a GET, got "
                                 f"{limits.prefix(header)}.")
        if "revision" in body and body["revision"] != from_header:
            raise errors.invalid("If-Match and revision disagree.")
        return from_header
    if "revision" in body:
        return body["revision"]
    raise errors.HTTPError(428, "Send If-Match with the accelerator's ETag, or 'revision' in "
                           "the body, so a concurrent change is not overwritten.",
                           "acceld.precondition_required")


def update_specs(req: webob.Request, uuid: str, acc_spec: str,
                 body: dict[str, Any]) -> util.Reply:
    """PUT /v1/accelerators/{uuid}/acc_specs -> 200; 400; 404; 409 stale revision; 428."""
    stored = len(util.json_bytes(body["acc_specs"]))
    if stored > limits.STORED_JSON_BYTES:
        raise errors.invalid(f"Invalid body field 'acc_specs': it takes {stored} "
                             f"bytes as stored (JSON); at most {limits.STORED_JSON_BYTES} "
                             "are accepted.")
    db = util.state(req).db
    accelerators.get_accelerator(db, uuid)  # 404 before 428
    record = accelerators.update_acc_specs(db, uuid, body["acc_specs"],
                                           _expected_revision(req, body))
    return util.json_response(_present(req, record), headers=_etag(record))


def set_state(req: webob.Request, uuid: str, body: dict[str, Any]) -> util.Reply:
    """PUT /v1/accelerators/{uuid}/state {"state": ready|inactive} -> 200; 404; 409."""
    record = util.state(req).conductor.set_state(uuid, body["state"])
    return util.json_response(_present(req, record), headers=_etag(record))


def attach(req: webob.Request, uuid: str, body: dict[str, Any]) -> util.Reply:
    """PUT /v1/accelerators/{uuid} {"instance_uuid"} | {"host"} -> 200; 404; 409 attached."""
    kind, target = ("instance", util.canonical_uuid(body["instance_uuid"])) \
        if "instance_uuid" in body else ("host", body["host"])
    record = util.state(req).conductor.attach(uuid, kind, target, util.project_scope(req))
    return util.json_response(_present(req, record), headers=_etag(record))


def detach(req: webob.Request, uuid: str) -> util.Reply:
    """DELETE /v1/accelerators/{uuid} -> 204; 404; 403 an instance attachment another
    project's request made; 409 while allocation records exist."""
    util.state(req).conductor.detach(uuid, util.project_scope(req))
    return util.empty_response(204)

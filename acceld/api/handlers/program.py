"""FPGA programming, ``PATCH /v2/deployables/{uuid}/program`` (contract 1.4): unlike
Cyborg (which answers when the card is programmed) acceld queues an operation and answers
202 at once; ``GET`` shows the deployable's newest operation."""

from __future__ import annotations

from typing import Any

import webob

from acceld.api import errors, util
from acceld.objects import program as program_objects
from acceld.objects import v2_inventory as inventory


def image_ref(image: dict[str, str]) -> str:
    """The one image reference of a program request: a Glance ``image_uuid`` or a local
    ``image_path``, which needs ``image_sha256`` (no Glance digest to check it against)."""
    given = [key for key in ("image_uuid", "image_path") if key in image]
    if len(given) != 1:
        raise errors.invalid("Invalid body field '0/value/0': give exactly one of "
                             "'image_uuid' and 'image_path'.")
    if given == ["image_path"] and "image_sha256" not in image:
        raise errors.invalid("Invalid body field '0/value/0': 'image_path' needs 'image_sha256'.")
    value = image[given[0]]
    return util.canonical_uuid(value) if given[0] == "image_uuid" else value


def _view(req: webob.Request, deployable: dict[str, Any],
          operation: dict[str, Any] | None) -> dict[str, Any]:
    return dict(util.linked(req, "deployables", deployable, bookmark=True), program=operation)


def program_deployable(req: webob.Request, uuid: str, body: list[dict[str, Any]]) -> util.Reply:
    """PATCH /v2/deployables/{uuid}/program [{"op": "replace", "path": "/program",
    "value": [{"image_uuid"|"image_path", "image_sha256"?}]}] -> 202 the deployable with
    ``program`` (the queued operation) and ``Location`` of its status; 400 bad body (the
    field named; a deployable that is no UUID), 404 unknown deployable, 409 not
    programmable, in use, or a program
    already in progress. Without ``image_sha256`` (upstream's body) the agent checks a
    Glance image against the digest Glance keeps."""
    uuid = util.require_uuid(uuid)
    image = body[0]["value"][0]
    st = util.state(req)
    operation = st.conductor.program_deployable(uuid, image_ref(image),
                                                image.get("image_sha256", "").lower())
    deployable = inventory.get_deployable(st.db, uuid)
    location = f"{util.base_url(req)}/v2/deployables/{uuid}/program"
    return util.json_response(_view(req, deployable, operation), status=202,
                              headers={"Location": location})


def show_program(req: webob.Request, uuid: str) -> util.Reply:
    """GET /v2/deployables/{uuid}/program -> 200 the deployable with ``program``: its
    newest program operation, or null; 404 unknown deployable."""
    db = util.state(req).db
    operation = program_objects.latest(db, uuid)
    return util.json_response(_view(req, inventory.get_deployable(db, uuid), operation))

"""Schemas of the Cyborg-compatible v2 API (query strings and bodies).

Every list takes ``limit`` and ``marker`` (openstacksdk sends them; Cyborg rejects them);
any other unknown query parameter is a 400, as in Cyborg.
"""

from __future__ import annotations

from typing import Any

_UUID = {"type": "string", "format": "uuid",
         "pattern": "^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                    "[0-9a-fA-F]{12}$"}
_TEXT = {"type": "string", "minLength": 1, "maxLength": 255}
_PAGE = {"limit": {"type": "string", "pattern": "^[1-9][0-9]{0,3}$"}, "marker": _UUID}


def _query(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": dict(_PAGE, **props),
            "additionalProperties": False}


NO_QUERY = {"type": "object", "additionalProperties": False}
LIST_QUERY = _query()
DEVICE_LIST_QUERY = _query(type=_TEXT, vendor=_TEXT, hostname=_TEXT)
ATTRIBUTE_LIST_QUERY = _query(deployable_id={"type": "string", "pattern": "^[0-9]{1,18}$"},
                              key=_TEXT)
PROFILE_LIST_QUERY = _query(name={"type": "string", "minLength": 1})
PROFILE_DELETE_QUERY = {"type": "object", "properties": {"value": {"type": "string",
                                                                    "minLength": 1}},
                        "required": ["value"], "additionalProperties": False}

ATTRIBUTE = {
    "type": "object",
    "properties": {"deployable_id": {"type": "integer", "minimum": 1},
                   "key": _TEXT,
                   "value": {"type": "string", "maxLength": 65535}},
    "required": ["deployable_id", "key", "value"],
    "additionalProperties": False,
}
# openstacksdk wraps the attribute in {"attribute": {...}}; Cyborg takes it bare.
ANY_JSON: dict[str, Any] = {}

# Cyborg takes a JSON list holding exactly one profile.
PROFILE_LIST = {"type": "array"}
PROFILE = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 255,
                 "pattern": "^[a-zA-Z0-9-_]+$"},
        "groups": {"type": "array", "minItems": 1,
                   "items": {"type": "object", "minProperties": 1,
                             "additionalProperties": {"type": ["string", "integer"]}}},
        "description": {"type": ["string", "null"], "maxLength": 65535},
        "uuid": _UUID,
    },
    "required": ["name", "groups"],
    "additionalProperties": False,
}
# the whole of a valid POST (Cyborg's one profile per request): a body it accepts needs
# no other check; one it refuses is worded by PROFILE_LIST, the count, then PROFILE
ONE_PROFILE = {"type": "array", "minItems": 1, "maxItems": 1, "items": PROFILE}

# -- accelerator requests ---------------------------------------------------------------------
# POST: other keys are ignored, as in Cyborg.
ARQ_CREATE = {
    "type": "object",
    "properties": {"device_profile_name": _TEXT},
    "required": ["device_profile_name"],
}
ARQ_LIST_QUERY = _query(instance=_UUID, bind_state={"enum": ["resolved"]})
ARQ_DELETE_QUERY = {
    "type": "object",
    "properties": {"arqs": {"type": "string", "minLength": 1}, "instance": _UUID},
    "additionalProperties": False,
}
ARQ_PATCH_PATHS = ("/hostname", "/device_rp_uuid", "/instance_uuid", "/project_id")
_UUID_PATHS = {"enum": ["/device_rp_uuid", "/instance_uuid"]}
_PATCH_OP = {
    "type": "object",
    "properties": {"op": {"enum": ["add", "remove"]}, "path": {"enum": list(ARQ_PATCH_PATHS)},
                   "value": {}},
    "required": ["op", "path"],
    "allOf": [
        # Cyborg fails with a 500 on an add without a value and stores any value.
        {"if": {"properties": {"op": {"const": "add"}}},
         "then": {"required": ["value"], "properties": {"value": _TEXT}}},
        {"if": {"properties": {"op": {"const": "add"}, "path": _UUID_PATHS}},
         "then": {"properties": {"value": _UUID}}},
    ],
}
# {arq_uuid: [json-patch op, ...], ...}
ARQ_PATCH = {
    "type": "object",
    "minProperties": 1,
    "propertyNames": {"pattern": _UUID["pattern"]},
    "additionalProperties": {"type": "array", "minItems": 1, "items": _PATCH_OP},
}

# -- FPGA programming (contract 1.4 "Deployables") ---------------------------------------------
# [{"op": "replace", "path": "/program", "value": [{"image_uuid": ..., "image_sha256": ...}]}]
# acceld requires the image's SHA-256 (what is loaded must be what the operator approved)
# and also takes ``image_path`` (an absolute path in the agent's
# ``[fpga_driver] local_image_dirs``) instead of a Glance ``image_uuid``.
_SHA256 = {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"}
_IMAGE = {
    "type": "object",
    "properties": {"image_uuid": _UUID, "image_sha256": _SHA256,
                   "image_path": {"type": "string", "pattern": "^/", "maxLength": 1024}},
    "required": ["image_sha256"],
    "additionalProperties": False,
}
PROGRAM_PATCH = {
    "type": "array",
    "minItems": 1,
    "maxItems": 1,
    "items": {
        "type": "object",
        "properties": {"op": {"enum": ["add", "replace"]}, "path": {"const": "/program"},
                       "value": {"type": "array", "minItems": 1, "maxItems": 1,
                                 "items": _IMAGE}},
        "required": ["op", "path", "value"],
        "additionalProperties": False,
    },
}

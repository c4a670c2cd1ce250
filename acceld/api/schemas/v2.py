"""Schemas of the Cyborg-compatible v2 API (query strings and bodies).

An unknown query parameter is a 400, as in Cyborg; every list also takes ``limit`` and
``marker``. Where Cyborg stores a value without checking its type a string or a number
(stored as its text) is accepted, and unknown body fields are ignored as there.
"""

from __future__ import annotations

from typing import Any

from acceld import limits
from acceld.api.schemas import NAME_CHARS, NUMBER_AS_TEXT, TEXT_CHARS, UUID, closed, name, whole

_TEXT = {"type": "string", "minLength": 1, "maxLength": limits.NAME_LENGTH}


def _scalar(max_length: int = limits.NAME_LENGTH, chars: str = NAME_CHARS,
            also: tuple[str, ...] = ()) -> dict[str, Any]:
    """What Cyborg takes for a free-form value: a string, or a number it stores as
    text (``also``: more JSON types)."""
    return {"type": ["string", "number", *also], "maxLength": max_length, "pattern": chars,
            "minimum": NUMBER_AS_TEXT["minimum"], "maximum": NUMBER_AS_TEXT["maximum"]}


_SCALAR = _scalar()


# every list's paging (acceld.api.listing): a page size (at most [api] max_limit, checked
# there) and the uuid of the item a page starts after
_PAGING = {"limit": {"type": "string", "pattern": whole("[1-9][0-9]{0,8}")}, "marker": UUID}


def _query(**props: Any) -> dict[str, Any]:
    """A list's query: ``props`` and the paging parameters."""
    return closed({**props, **_PAGING})


NO_QUERY = closed()
LIST_QUERY = _query()
DEVICE_LIST_QUERY = _query(type=_TEXT, vendor=_TEXT, hostname=_TEXT)
ATTRIBUTE_LIST_QUERY = _query(deployable_id={"type": "string", "pattern": whole("[0-9]{1,18}")},
                              key=_TEXT)
PROFILE_LIST_QUERY = _query(name={"type": "string", "minLength": 1})
PROFILE_DELETE_QUERY = closed({"value": {"type": "string"}}, ["value"])

# bare, as Cyborg takes it (the route also takes it wrapped in {"attribute": ...}, as
# openstacksdk sends it)
ATTRIBUTE = {
    "type": "object",
    "properties": {"deployable_id": {"type": "number", "minimum": 1,
                                     "maximum": limits.INT_MAX},
                   "key": _scalar(limits.TEXT_LENGTH),
                   "value": _scalar(limits.TEXT_LENGTH)},
    "required": ["deployable_id", "key", "value"],
}
PROFILE = {
    "type": "object",
    "properties": {
        "name": name(pattern=whole("[a-zA-Z0-9_-]+")),
        "groups": {"type": "array", "minItems": 1, "maxItems": limits.PROFILE_GROUPS,
                   "items": {"type": "object", "minProperties": 1,
                             "maxProperties": limits.GROUP_KEYS,
                             "propertyNames": {"maxLength": limits.NAME_LENGTH,
                                               "pattern": NAME_CHARS},
                             "additionalProperties": dict(_SCALAR,
                                                          type=["string", "integer"])}},
        "description": _scalar(limits.TEXT_LENGTH, TEXT_CHARS, ("null",)),
        "uuid": {"anyOf": [UUID, {"const": ""}]},      # "": none given
    },
    "required": ["name", "groups"],
}
# a POST: Cyborg's list of one profile (util.validate words another count as Cyborg does)
ONE_PROFILE = {"type": "array", "minItems": 1, "maxItems": 1, "items": PROFILE}

# -- accelerator requests ---------------------------------------------------------------------
# POST: other keys are ignored, as in Cyborg; a name it cannot know is a 404 there too.
ARQ_CREATE = {
    "type": "object",
    "properties": {"device_profile_name": dict(NUMBER_AS_TEXT, type=["string", "number"])},
    "required": ["device_profile_name"],
}
# Explain (acceld extension, docs/explain.md): how granular groups may share a provider
# (Nova's ``group_policy``; Nova's default for several groups is "none").
GROUP_POLICY = {"enum": ["none", "isolate"]}
AVAILABILITY_QUERY = closed({"group_policy": GROUP_POLICY})
ARQ_DRY_RUN = closed({"device_profile_name": {"type": "string", "minLength": 1,
                                              "maxLength": limits.NAME_LENGTH},
                      "hostname": _TEXT, "group_policy": GROUP_POLICY},
                     ["device_profile_name"])
ARQ_LIST_QUERY = _query(instance=UUID, bind_state={"enum": ["resolved"]})
ARQ_DELETE_QUERY = closed({"arqs": {"type": "string", "minLength": 1}, "instance": UUID})
# Cyborg takes a path with or without its leading "/".
HOT_PLUG = closed({"instance_uuid": UUID}, required=["instance_uuid"])

ARQ_PATCH_PATHS = ("/hostname", "/device_rp_uuid", "/instance_uuid", "/project_id")
_PATCH_OP = {
    "type": "object",
    "properties": {"op": {"enum": ["add", "remove"]},
                   "path": {"enum": [*ARQ_PATCH_PATHS, *(p[1:] for p in ARQ_PATCH_PATHS)]},
                   "value": {}},
    "required": ["op", "path"],
    # Cyborg fails with a 500 on an add without a value and stores any value given: an
    # unknown device_rp_uuid or ARQ is a 404 after, as there
    "if": {"properties": {"op": {"const": "add"}}},
    "then": {"required": ["value"], "properties": {"value": _SCALAR}},
}
# {arq_uuid: [json-patch op, ...], ...}
ARQ_PATCH = {
    "type": "object",
    "minProperties": 1,
    "propertyNames": {"maxLength": 255},
    "additionalProperties": {"type": "array", "minItems": 1, "items": _PATCH_OP},
}

# -- FPGA programming (contract 1.4 "Deployables") ---------------------------------------------
# [{"op": "replace", "path": "/program", "value": [{"image_uuid": ..., "image_sha256": ...}]}]
# Upstream's body names a Glance image; acceld also takes the image's SHA-256
# (``image_sha256``: without it the agent checks the image against the digest Glance
# keeps, ``os_hash_value``) and ``image_path`` (an absolute path in the agent's
# ``[fpga_driver] local_image_dirs``, which needs ``image_sha256``) instead of a Glance
# ``image_uuid``.
_SHA256 = {"type": "string", "pattern": whole("[0-9a-fA-F]{64}")}
_IMAGE = closed({"image_uuid": UUID, "image_sha256": _SHA256,
                 "image_path": {"type": "string", "maxLength": 1024,
                                "pattern": whole(f"/[^{limits.NAME_FORBIDDEN}]*")}})
PROGRAM_PATCH = {
    "type": "array",
    "minItems": 1,
    "maxItems": 1,
    "items": closed({"op": {"enum": ["add", "replace"]}, "path": {"const": "/program"},
                     "value": {"type": "array", "minItems": 1, "maxItems": 1, "items": _IMAGE}},
                    ["op", "path", "value"]),
}

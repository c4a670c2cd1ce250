"""Schemas of the v1 API and the operator endpoints."""

from __future__ import annotations

from acceld import limits, states
from acceld.api.schemas import INTEGER_ID, SHOWN_NAME_CHARS, UUID, name, whole

# a name: no control or bidirectional-override character, and not only spaces
_NAME = {"type": "string", "minLength": 1, "maxLength": limits.NAME_LENGTH,
         "pattern": SHOWN_NAME_CHARS}
_HOST = name()

CREATE = {
    "type": "object",
    "properties": {"name": _NAME, "uuid": UUID},
    "required": ["name"],
    "additionalProperties": False,
}

UPDATE_SPECS = {
    "type": "object",
    "properties": {"acc_specs": {"type": "object", "maxProperties": 64,
                                 "propertyNames": name()},
                   "revision": INTEGER_ID},
    "required": ["acc_specs"],
    "additionalProperties": False,
}

SET_STATE = {
    "type": "object",
    "properties": {"state": {"type": "string", "enum": sorted(states.REQUESTABLE)}},
    "required": ["state"],
    "additionalProperties": False,
}

ATTACH = {
    "type": "object",
    "properties": {"instance_uuid": UUID, "host": _HOST},
    "minProperties": 1,
    "maxProperties": 1,
    "additionalProperties": False,
}

LIST_QUERY = {
    "type": "object",
    "properties": {
        "host": _HOST,
        "state": {"type": "string", "enum": list(states.DEVICE_STATES)},
        "device_type": {"type": "string", "enum": list(states.DEVICE_TYPES)},
        "instance_uuid": UUID,
        "limit": {"type": "string", "pattern": whole("[1-9][0-9]{0,3}")},
        "marker": UUID,
    },
    "additionalProperties": False,
}

NO_QUERY = {"type": "object", "additionalProperties": False}

_BOOL_QUERY = {"type": "string", "enum": ["true", "false", "True", "False", "1", "0"]}
DRIVER_QUERY = {"type": "object", "properties": {"host": _HOST, "long": _BOOL_QUERY},
                "additionalProperties": False}
BACKEND_QUERY = {"type": "object", "properties": {"host": _HOST},
                 "additionalProperties": False}

DRIVER_ACTION = {
    "type": "object",
    "properties": {"action": {"type": "string", "enum": ["install", "uninstall", "update"]},
                   "host": _HOST},
    "required": ["action"],
    "additionalProperties": False,
}

DISCOVER = {"type": "object", "properties": {"host": _HOST}, "additionalProperties": False}

PLACEMENT_SYNC = {"type": "object",
                  "properties": {"host": _HOST, "dry_run": {"type": "boolean"}},
                  "additionalProperties": False}

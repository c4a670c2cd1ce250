"""Schemas of the v1 API and the operator endpoints."""

from __future__ import annotations

from acceld import states
from acceld.api.schemas import INTEGER_ID, SHOWN_NAME_CHARS, UUID, closed, name, whole

# a name: no control or bidirectional-override character, and not only spaces
_NAME = name(pattern=SHOWN_NAME_CHARS)
_HOST = name()

CREATE = closed({"name": _NAME, "uuid": UUID}, ["name"])
UPDATE_SPECS = closed({"acc_specs": {"type": "object", "maxProperties": 64,
                                     "propertyNames": name()},
                       "revision": INTEGER_ID}, ["acc_specs"])
SET_STATE = closed({"state": {"type": "string", "enum": sorted(states.REQUESTABLE)}}, ["state"])
ATTACH = closed({"instance_uuid": UUID, "host": _HOST}, minProperties=1, maxProperties=1)

LIST_QUERY = closed({
    "host": _HOST,
    "state": {"type": "string", "enum": list(states.DEVICE_STATES)},
    "device_type": {"type": "string", "enum": list(states.DEVICE_TYPES)},
    "instance_uuid": UUID,
    "limit": {"type": "string", "pattern": whole("[1-9][0-9]{0,3}")},
    "marker": UUID,
})
NO_QUERY = closed()
_BOOL_QUERY = {"type": "string", "enum": ["true", "false", "True", "False", "1", "0"]}
DRIVER_QUERY = closed({"host": _HOST, "long": _BOOL_QUERY})
BACKEND_QUERY = closed({"host": _HOST})

DRIVER_ACTION = closed({"action": {"type": "string", "enum": ["install", "uninstall", "update"]},
                        "host": _HOST}, ["action"])
DISCOVER = closed({"host": _HOST})
PLACEMENT_SYNC = closed({"host": _HOST, "dry_run": {"type": "boolean"}})

# An ISO 8601 date or date and time (UTC unless it names an offset); the handler parses it.
TIME_QUERY = {"type": "string", "maxLength": 40, "pattern": whole(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?)?")}
USAGE_QUERY = closed({
    "project_id": _HOST,
    "since": TIME_QUERY,
    "until": TIME_QUERY,
    "group_by": {"type": "string", "enum": ["project", "device", "host", "instance"]},
}, ["since"])
LEDGER_QUERY = closed({
    "project_id": _HOST,
    "device_uuid": UUID,
    "arq_uuid": UUID,
    "since": TIME_QUERY,
    "until": TIME_QUERY,
    "limit": {"type": "string", "pattern": whole("[1-9][0-9]{0,3}")},
    "marker": {"type": "string", "pattern": whole("[1-9][0-9]{0,17}")},
})
# an operator's note kept with a health or maintenance change
_REASON = {"type": "string", "maxLength": 255, "pattern": SHOWN_NAME_CHARS}
HEALTH_ACTION = closed({"action": {"type": "string", "enum": sorted(states.HEALTH_ACTIONS)},
                        "reason": _REASON}, ["action"])
MAINTENANCE = closed({"reason": _REASON})

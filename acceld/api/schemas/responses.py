"""JSON Schemas of the API's response bodies (the OpenAPI document's; schemathesis checks
every answer against them): the fields every answer has and their types; an object may
carry others (a later microversion's, a list's paging links).
"""

from __future__ import annotations

from typing import Any

from acceld import states

_STR = {"type": "string"}
_STR_OR_NULL = {"type": ["string", "null"]}
_INT = {"type": "integer"}
_INT_OR_NULL = {"type": ["integer", "null"]}
_BOOL = {"type": "boolean"}
_UUID = {"type": "string", "format": "uuid"}
_UUID_OR_NULL = {"anyOf": [_UUID, {"type": "null"}]}
_TIME = {"type": "string", "format": "date-time"}
_TIME_OR_NULL = {"anyOf": [_TIME, {"type": "null"}]}
_OBJECT = {"type": "object"}


def _obj(required: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """An object with ``required`` fields (name -> schema) and ``optional`` ones."""
    return {"type": "object", "properties": {**required, **optional},
            "required": list(required)}


LINK = _obj({"href": _STR, "rel": _STR})
_LINKS = {"type": "array", "items": LINK}


def _list_of(key: str, item: dict[str, Any], paged: bool = False) -> dict[str, Any]:
    """A collection: ``{key: [item, ...]}``; ``paged``: with ``<key>_links`` (the next
    page's link) on a page that has one (``acceld.api.listing``)."""
    links = {f"{key}_links": _LINKS} if paged else {}
    return _obj({key: {"type": "array", "items": item}}, **links)

ERROR = _obj({"errors": {"type": "array", "minItems": 1, "items": _obj({
    "status": {"type": "integer", "minimum": 400, "maximum": 599},
    "code": _STR,
    "title": _STR,
    "detail": _STR,
    "request_id": _STR_OR_NULL,
})}})

# -- version discovery -------------------------------------------------------------------------
_V1_VERSION = _obj({"id": {"const": "v1"}, "status": _STR, "links": _LINKS})
_V2_VERSION = _obj({"id": _STR, "status": _STR, "min_version": _STR, "max_version": _STR,
                    "links": _LINKS})
VERSIONS = _obj({"name": _STR, "description": _STR,
                 "versions": {"type": "array", "items": {"anyOf": [_V2_VERSION, _V1_VERSION]}},
                 "default_version": _V2_VERSION})
V1_VERSION = _obj({"version": _V1_VERSION})
V2_VERSION = _V2_VERSION
METRICS = {"type": "string",
           "description": "The Prometheus text exposition format (docs/metrics.md)."}
OPENAPI = _obj({"openapi": _STR, "info": _OBJECT, "paths": _OBJECT})
TEXT = _STR           # a file of the fleet view (HTML, JavaScript, CSS)

# -- v1 ----------------------------------------------------------------------------------------
ACCELERATOR = _obj({
    "uuid": _UUID, "name": _STR, "host": _STR_OR_NULL, "driver": _STR_OR_NULL,
    "device_type": {"enum": [*states.DEVICE_TYPES, None]},
    "vendor_id": _STR_OR_NULL, "product_id": _STR_OR_NULL,
    "state": {"enum": list(states.DEVICE_STATES)},
    "health": {"enum": list(states.HEALTH_STATES)},
    "health_reasons": {"type": "array", "items": _STR},
    "acc_specs": _OBJECT,
    "attached_to": {"anyOf": [{"type": "null"}, _obj(
        {"type": {"enum": ["instance", "host"]}, "id": _STR_OR_NULL},
        hot_plug={"enum": [states.HOT_ATTACHING, states.HOT_ATTACHED, states.HOT_DETACHING,
                           None]})]},
    "allocations": {"type": "array", "items": _OBJECT},
    "revision": _INT, "last_error": _STR_OR_NULL,
    "lifecycle": {"enum": list(states.LIFECYCLE_STATES)}, "lifecycle_reason": _STR_OR_NULL,
    "maintenance": {"enum": [states.MAINTENANCE_DRAINING, states.MAINTENANCE_DRAINED, None]},
    "maintenance_reason": _STR_OR_NULL,
    "created_at": _TIME, "updated_at": _TIME_OR_NULL, "links": _LINKS,
})
ACCELERATORS = _list_of("accelerator", ACCELERATOR, paged=True)

SERVICES = _obj({
    "services": {"type": "array", "items": _obj({
        "host": _STR, "binary": _STR, "version": _STR_OR_NULL, "last_seen_at": _TIME_OR_NULL,
        "alive": _BOOL,
        # an agent's: the conductor that owns its host (null for a conductor, and for an
        # agent whose heartbeats no conductor named itself for)
        "conductor": _STR_OR_NULL,
        # a conductor's: how many alive agents it owns (null for an agent)
        "hosts": _INT_OR_NULL})},
    "placement": {"type": "array", "items": _OBJECT},
})
_PLACEMENT_HOST = _obj({"host": _STR, "in_sync": _BOOL, "last_error": _STR_OR_NULL,
                        "last_synced_at": _TIME_OR_NULL, "last_attempt_at": _TIME_OR_NULL},
                       last_error_at=_TIME_OR_NULL, next_retry_at=_TIME_OR_NULL)
PLACEMENT_STATUS = _obj({
    "placement": _obj({"configured": _BOOL, "reachable": {"type": ["boolean", "null"]},
                       "detail": _STR}),
    "hosts": {"type": "array", "items": _PLACEMENT_HOST},
})
PLACEMENT_SYNC = _list_of("results", _obj({"host": _STR, "steps": {"type": "array"},
                                           "in_sync": _BOOL, "error": _STR_OR_NULL}))
DRIVERS = _list_of("drivers", _obj(
    {"host": _STR, "name": _STR, "version": _STR_OR_NULL,
     "state": {"enum": list(states.DRIVER_STATES)}, "device_count": _INT,
     "error": _STR_OR_NULL},
    explanation={"anyOf": [{"type": "null"}, _OBJECT]},
    capabilities={"type": "array", "items": _STR}))
DRIVER_RESULTS = _list_of("results", _obj({"host": _STR, "driver": _STR, "ok": _BOOL,
                                           "error": _STR_OR_NULL}))
DISCOVERED = _list_of("hosts", _STR)
GUESTS = _obj({"guests": {"type": "array", "items": _obj({
    "host": _STR, "uuid": _UUID, "name": _STR, "running": _BOOL,
    "aliases": {"type": "array", "items": _STR},
    "arqs": {"type": "array", "items": _UUID}})},
    "unreachable": {"type": "array", "items": _STR}})
BACKENDS = _list_of("backends", _obj({
    "host": _STR, "driver": _STR, "backend": _STR, "services": {"type": "array", "items": _STR},
    "devices": _INT, "deployables": _INT}))
_TRANSITION = _obj({"device_uuid": _UUID, "host": _STR_OR_NULL,
                    "what": {"enum": ["lifecycle", "maintenance"]}, "before": _STR,
                    "after": _STR, "reason": _STR, "actor": _STR, "changed": _BOOL,
                    "at": _TIME, "holders": {"type": "array", "items": _OBJECT}})
# POST /v1/accelerators/{uuid}/health, PUT and DELETE .../maintenance
DEVICE_HEALTH = _obj({
    "uuid": _UUID, "host": _STR_OR_NULL, "health": {"enum": list(states.HEALTH_STATES)},
    "lifecycle": {"enum": list(states.LIFECYCLE_STATES)}, "lifecycle_reason": _STR_OR_NULL,
    "lifecycle_since": _TIME_OR_NULL,
    "maintenance": {"enum": [states.MAINTENANCE_DRAINING, states.MAINTENANCE_DRAINED, None]},
    "maintenance_reason": _STR_OR_NULL, "maintenance_since": _TIME_OR_NULL,
    "schedulable": _BOOL, "bound": {"type": "array", "items": _OBJECT},
}, transition=_TRANSITION)
DEVICE_STATS = _obj({"uuid": _UUID, "host": _STR,
                     "stats": {"type": "object", "additionalProperties": {"type": "number"}}})

# -- v2 ----------------------------------------------------------------------------------------
DEVICE = _obj({
    "uuid": _UUID, "type": _STR, "vendor": _STR, "model": _STR_OR_NULL,
    "std_board_info": _STR_OR_NULL, "vendor_board_info": _STR_OR_NULL,
    "hostname": _STR_OR_NULL, "created_at": _TIME, "updated_at": _TIME_OR_NULL,
    "links": _LINKS,
}, status={"enum": ["enabled", "maintaining"]})          # from microversion 2.3
DEVICES = _list_of("devices", DEVICE, paged=True)

DEPLOYABLE = _obj({
    "uuid": _UUID, "parent_id": _INT_OR_NULL, "root_id": _INT_OR_NULL, "name": _STR,
    "num_accelerators": _INT, "device_id": _INT, "attributes_list": _STR,
    "rp_uuid": _STR_OR_NULL, "driver_name": _STR_OR_NULL, "bitstream_id": _STR_OR_NULL,
    "created_at": _TIME, "updated_at": _TIME_OR_NULL, "links": _LINKS,
})
DEPLOYABLES = _list_of("deployables", DEPLOYABLE, paged=True)
PROGRAM_OPERATION = _obj({
    "uuid": _UUID, "deployable_uuid": _UUID, "device_uuid": _UUID, "host": _STR,
    "image_ref": _STR, "image_sha256": _STR_OR_NULL,
    "state": {"enum": list(states.PROGRAM_STATES)},
    "progress": {"type": "integer", "minimum": 0, "maximum": 100},
    "message": _STR_OR_NULL, "arq_uuid": _UUID_OR_NULL,
    "created_at": _TIME, "updated_at": _TIME_OR_NULL, "started_at": _TIME_OR_NULL,
    "finished_at": _TIME_OR_NULL,
})
DEPLOYABLE_PROGRAM = {"allOf": [DEPLOYABLE, _obj(
    {"program": {"anyOf": [{"type": "null"}, PROGRAM_OPERATION]}})]}

ATTRIBUTE = _obj({"uuid": _UUID, "deployable_id": _INT, "key": _STR, "value": _STR,
                  "created_at": _TIME, "updated_at": _TIME_OR_NULL, "links": _LINKS})
ATTRIBUTES = _list_of("attributes", ATTRIBUTE, paged=True)

DEVICE_PROFILE = _obj({
    "uuid": _UUID, "name": _STR, "description": _STR_OR_NULL,
    "groups": {"type": "array", "items": {"type": "object",
                                          "additionalProperties": _STR}},
    "created_at": _TIME, "updated_at": _TIME_OR_NULL, "links": _LINKS,
})
DEVICE_PROFILES = _list_of("device_profiles", DEVICE_PROFILE, paged=True)
DEVICE_PROFILE_SHOW = _obj({"device_profile": DEVICE_PROFILE})

ARQ = _obj({
    "uuid": _UUID, "state": {"enum": list(states.ARQ_STATES)},
    "device_profile_name": _STR, "device_profile_group_id": _INT,
    "hostname": _STR_OR_NULL, "device_rp_uuid": _STR_OR_NULL, "instance_uuid": _STR_OR_NULL,
    "project_id": _STR_OR_NULL, "attach_handle_type": _STR,
    "attach_handle_uuid": _STR_OR_NULL, "attach_handle_info": _OBJECT,
    "created_at": _TIME, "updated_at": _TIME_OR_NULL, "links": _LINKS,
})
ARQS = _list_of("arqs", ARQ, paged=True)
# acceld's hot-plug extension: an ARQ with where its live attach stands
_WHY = {"reason": _STR, "detail": _STR, "device_profile_group_id": _INT_OR_NULL,
        "device_rp_uuid": _UUID_OR_NULL}
_GROUP_POLICY = {"enum": ["none", "isolate"]}
AVAILABILITY = _obj({
    "device_profile_name": _STR, "device_profile_uuid": _UUID, "group_policy": _GROUP_POLICY,
    "count": _INT,
    "hosts": {"type": "array", "items": _obj({"hostname": _STR, "count": _INT,
                                              "device_rp_uuids": {"type": "array",
                                                                  "items": _UUID}})},
    "not_fitting": {"type": "array", "items": _obj({"hostname": _STR, **_WHY})}})
ARQ_DRY_RUN = _obj(
    {"device_profile_name": _STR, "group_policy": _GROUP_POLICY, "would_bind": _BOOL,
     "hostname": _STR_OR_NULL,
     "arqs": {"type": "array", "items": _obj({
         "device_profile_group_id": _INT, "hostname": _STR, "device_rp_uuid": _UUID,
         "device_uuid": _UUID})}},
    **_WHY)
HOT_PLUG = _obj({**ARQ["properties"],
                 "hot_plug": {"enum": [states.ARQ_INITIAL, *sorted(states.HOT_PLUGGED)]}})

# -- the allocation ledger (docs/ledger.md) ----------------------------------------------------
LEDGER_ENTRY = _obj({
    "id": _INT, "at": _TIME, "event": _STR, "kind": _STR, "device_uuid": _STR,
    "deployable_uuid": _STR_OR_NULL, "attach_handle_uuid": _STR_OR_NULL,
    "arq_uuid": _STR_OR_NULL, "instance_uuid": _STR_OR_NULL, "host": _STR_OR_NULL,
    "project_id": _STR_OR_NULL, "user_id": _STR_OR_NULL, "from_state": _STR_OR_NULL,
    "to_state": _STR_OR_NULL, "detail": _STR_OR_NULL})
LEDGER = _list_of("ledger", LEDGER_ENTRY, paged=True)
USAGE = _obj({
    "since": _TIME, "until": _TIME, "group_by": _STR,
    "usage": {"type": "array", "items": _obj({"device_hours": {"type": "number"},
                                              "holdings": _INT})}})

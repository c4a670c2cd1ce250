"""The payloads of acceld's versioned notifications, their JSON schemas and event types.

One frozen dataclass per kind of payload; its ``to_primitive()`` is the OpenStack-style
envelope ``{"acceld_object.name", "acceld_object.namespace": "acceld",
"acceld_object.version", "acceld_object.data"}``. A payload's version is
``MAJOR.MINOR``: a new optional field bumps the minor version, a renamed or removed one
the major (consumers check the major). :data:`EVENTS` lists every event type with its
payload class, priority and when it is sent: docs/notifications.md describes them, and
``python -m acceld.notify`` writes docs/notification-schemas.json (the schema of
every payload, which the tests validate every notification they receive against).

Payload versions (one line of history each; a test guards the list):

* DeviceUsagePayload 1.0: usage of one host's devices (the shared usage contract).
* DevicePayload 1.0, DeviceStatePayload 1.0, ArqPayload 1.0, ArqDeletedPayload 1.0,
  ProgramPayload 1.0, DriverPayload 1.0: initial.
* DeviceHealthPayload 1.0: a step of the health life cycle or maintenance.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

from acceld import AGENT_BINARY, API_BINARY, CONDUCTOR_BINARY

NAMESPACE = "acceld"
ENVELOPE = ("acceld_object.name", "acceld_object.namespace", "acceld_object.version",
            "acceld_object.data")

_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
_UUID = {"type": "string", "minLength": 1, "maxLength": 36}
_NUUID = {"type": ["string", "null"], "maxLength": 36}
_NUMBER = {"type": "number"}
_COUNT = {"type": "integer", "minimum": 0}


def _object(properties: dict[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "required": sorted(k for k in properties if k not in optional)}


@dataclasses.dataclass(frozen=True)
class Payload:
    """Base of the payloads: subclasses set NAME, VERSION, DATA_SCHEMA and their fields."""

    NAME: ClassVar[str] = ""
    VERSION: ClassVar[str] = ""
    DATA_SCHEMA: ClassVar[dict[str, Any]] = {}

    def data(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_primitive(self) -> dict[str, Any]:
        return {"acceld_object.name": self.NAME, "acceld_object.namespace": NAMESPACE,
                "acceld_object.version": self.VERSION, "acceld_object.data": self.data()}

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The JSON schema of the envelope (any minor version of this major)."""
        major = cls.VERSION.split(".")[0]
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"{cls.NAME} {cls.VERSION}", "type": "object",
            "required": list(ENVELOPE), "additionalProperties": False,
            "properties": {
                "acceld_object.name": {"const": cls.NAME},
                "acceld_object.namespace": {"const": NAMESPACE},
                "acceld_object.version": {"type": "string",
                                          "pattern": rf"^{major}\.[0-9]+$"},
                "acceld_object.data": cls.DATA_SCHEMA}}


# -- usage (docs: the usage contract shared with the metrics collector) ------------------------

#: The metrics of a usage notification, and the keys drivers' ``stats()`` use for each.
METRICS: dict[str, tuple[str, ...]] = {
    "utilization_percent": ("utilization_percent", "utilization_gpu_percent"),
    "memory_used_bytes": ("memory_used_bytes",),
    "memory_total_bytes": ("memory_total_bytes",),
    "temperature_celsius": ("temperature_celsius", "temperature_c"),
    "power_watts": ("power_watts", "power_w"),
    "ecc_corrected_total": ("ecc_corrected_total",),
    "ecc_uncorrected_total": ("ecc_uncorrected_total",),
}
_COUNTERS = ("ecc_corrected_total", "ecc_uncorrected_total")
_METRIC_OF = {key: metric for metric, keys in METRICS.items() for key in keys}


def usage_metrics(stats: Mapping[str, float]) -> dict[str, float | int]:
    """A driver's stats of one device as the usage notification names them (the keys it
    has no metric for are left out; a counter is an integer)."""
    out: dict[str, float | int] = {}
    for key, value in stats.items():
        metric = _METRIC_OF.get(key)
        if metric is not None and metric not in out:
            out[metric] = int(value) if metric in _COUNTERS else float(value)
    return out


@dataclasses.dataclass(frozen=True)
class DeviceUsage:
    driver: str
    identity: str
    type: str
    metrics: Mapping[str, float | int]


@dataclasses.dataclass(frozen=True)
class DeviceUsagePayload(Payload):
    NAME: ClassVar[str] = "DeviceUsagePayload"
    VERSION: ClassVar[str] = "1.0"
    DATA_SCHEMA: ClassVar[dict[str, Any]] = _object({
        "host": _STR, "period_s": {"type": "number", "exclusiveMinimum": 0},
        "sampled_at": {"type": "string", "pattern":
                       r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"},
        "devices": {"type": "array", "items": _object({
            "driver": _STR, "identity": _STR, "type": _STR,
            # a later minor version may add metrics: consumers keep the ones they know
            "metrics": dict(_object({
                "utilization_percent": {"type": "number", "minimum": 0, "maximum": 100},
                "memory_used_bytes": {"type": "number", "minimum": 0},
                "memory_total_bytes": {"type": "number", "minimum": 0},
                "temperature_celsius": _NUMBER,
                "power_watts": {"type": "number", "minimum": 0},
                "ecc_corrected_total": _COUNT, "ecc_uncorrected_total": _COUNT,
            }, optional=tuple(METRICS)), additionalProperties=_NUMBER)})}})

    host: str
    period_s: float
    sampled_at: str
    devices: tuple[DeviceUsage, ...]

    def data(self) -> dict[str, Any]:
        return {"host": self.host, "period_s": float(self.period_s),
                "sampled_at": self.sampled_at,
                "devices": [{"driver": d.driver, "identity": d.identity, "type": d.type,
                             "metrics": dict(d.metrics)} for d in self.devices]}


def timestamp(when: datetime.datetime | None = None) -> str:
    """``when`` (default now) as the payloads write times: UTC, seconds, ``Z``."""
    when = when or datetime.datetime.now(datetime.UTC)
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- inventory ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DevicePayload(Payload):
    """A device as its agent reported it, with the uuid the conductor gave it."""

    NAME: ClassVar[str] = "DevicePayload"
    VERSION: ClassVar[str] = "1.0"
    DATA_SCHEMA: ClassVar[dict[str, Any]] = _object({
        "uuid": _UUID, "host": _STR, "driver": _STR, "identity": _STR, "type": _STR,
        "vendor": _STR, "model": _STR, "name": _STR})

    uuid: str
    host: str
    driver: str
    identity: str
    type: str
    vendor: str
    model: str
    name: str


@dataclasses.dataclass(frozen=True)
class DeviceStatePayload(Payload):
    """A device's life cycle state after a change (``previous_state``: before it)."""

    NAME: ClassVar[str] = "DeviceStatePayload"
    VERSION: ClassVar[str] = "1.0"
    DATA_SCHEMA: ClassVar[dict[str, Any]] = _object({
        "uuid": _UUID, "name": _STR, "host": _NSTR, "driver": _NSTR, "type": _STR,
        "state": _STR, "previous_state": _STR, "health": _STR, "error": _NSTR})

    uuid: str
    name: str
    host: str | None
    driver: str | None
    type: str
    state: str
    previous_state: str
    health: str
    error: str | None

    @classmethod
    def of(cls, record: Mapping[str, Any], previous_state: str) -> DeviceStatePayload:
        """From the v1 accelerator record (``objects.accelerators.to_dict``)."""
        return cls(uuid=record["uuid"], name=record["name"], host=record["host"],
                   driver=record["driver"], type=record["device_type"],
                   state=record["state"], previous_state=previous_state,
                   health=record["health"], error=record["last_error"])


@dataclasses.dataclass(frozen=True)
class DeviceHealthPayload(Payload):
    """One step of a device's health life cycle (``what`` lifecycle: healthy, suspect,
    quarantined, resetting, failed) or maintenance (``what`` maintenance: in_service,
    maintenance); ``holders``: the guests holding the device at that step (a quarantine
    or drain leaves them running: this is how they hear of it). ``at``: naive UTC, as
    the database keeps it. ``acceld.objects.health.Transition`` is this payload."""

    NAME: ClassVar[str] = "DeviceHealthPayload"
    VERSION: ClassVar[str] = "1.0"
    DATA_SCHEMA: ClassVar[dict[str, Any]] = _object({
        "uuid": _UUID, "host": _NSTR, "what": {"enum": ["lifecycle", "maintenance"]},
        "before": _STR, "after": _STR, "reason": _STR, "actor": _STR, "at": _STR,
        "holders": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "properties": {
                "accelerator_request": _UUID, "instance_uuid": _NUUID, "state": _STR,
                "attached_to": _STR, "attach_type": _STR}}}})

    uuid: str
    host: str | None
    what: str
    before: str
    after: str
    reason: str
    actor: str
    at: datetime.datetime
    holders: tuple[Mapping[str, Any], ...]

    def data(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self), holders=[dict(h) for h in self.holders],
                    at=timestamp(self.at.replace(tzinfo=datetime.UTC)))


# -- accelerator requests ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ArqPayload(Payload):
    """An ARQ as the v2 API shows it, after the change."""

    NAME: ClassVar[str] = "ArqPayload"
    VERSION: ClassVar[str] = "1.0"
    DATA_SCHEMA: ClassVar[dict[str, Any]] = _object({
        "uuid": _UUID, "state": _STR, "device_profile_name": _STR,
        "device_profile_group_id": _COUNT, "project_id": _NSTR, "instance_uuid": _NUUID,
        "hostname": _NSTR, "device_rp_uuid": _NUUID, "attach_handle_uuid": _NUUID,
        "attach_handle_type": _STR})

    uuid: str
    state: str
    device_profile_name: str
    device_profile_group_id: int
    project_id: str | None
    instance_uuid: str | None
    hostname: str | None
    device_rp_uuid: str | None
    attach_handle_uuid: str | None
    attach_handle_type: str

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> ArqPayload:
        """From an ARQ record (``objects.arqs``' API view)."""
        return cls(**{f.name: record[f.name] for f in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class ArqDeletedPayload(Payload):
    """An ARQ that no longer exists (``instance_uuid``: given when it was deleted with
    its instance, null when deleted by its uuid)."""

    NAME: ClassVar[str] = "ArqDeletedPayload"
    VERSION: ClassVar[str] = "1.0"
    DATA_SCHEMA: ClassVar[dict[str, Any]] = _object({"uuid": _UUID, "instance_uuid": _NUUID})

    uuid: str
    instance_uuid: str | None


# -- agents: programming and drivers -------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ProgramPayload(Payload):
    """One FPGA program operation (``ok`` and ``error``: null until it ends)."""

    NAME: ClassVar[str] = "ProgramPayload"
    VERSION: ClassVar[str] = "1.0"
    DATA_SCHEMA: ClassVar[dict[str, Any]] = _object({
        "operation_uuid": _UUID, "host": _STR, "driver": _STR, "identity": _STR,
        "deployable_uuid": _UUID, "device_uuid": _UUID, "image_ref": _STR,
        "ok": {"type": ["boolean", "null"]}, "error": _NSTR})

    operation_uuid: str
    host: str
    driver: str
    identity: str
    deployable_uuid: str
    device_uuid: str
    image_ref: str
    ok: bool | None = None
    error: str | None = None

    @classmethod
    def of(cls, op: Mapping[str, Any], ok: bool | None = None,
           error: str | None = None) -> ProgramPayload:
        """From the agent's program operation (``objects.program.agent_op``)."""
        return cls(operation_uuid=op["op_id"], host=op["host"], driver=op["driver"],
                   identity=op["identity"], deployable_uuid=op["deployable_uuid"],
                   device_uuid=op["device_uuid"], image_ref=op["image_ref"], ok=ok,
                   error=error)


@dataclasses.dataclass(frozen=True)
class DriverPayload(Payload):
    """A driver of one host as its agent runs it."""

    NAME: ClassVar[str] = "DriverPayload"
    VERSION: ClassVar[str] = "1.0"
    DATA_SCHEMA: ClassVar[dict[str, Any]] = _object({
        "host": _STR, "driver": _STR, "version": _STR, "state": _STR, "error": _NSTR})

    host: str
    driver: str
    version: str
    state: str
    error: str | None


# -- the event types ----------------------------------------------------------------------------

class Event(NamedTuple):
    payload: type[Payload]
    priority: str
    publisher: str          # the service that sends it
    when: str


EVENTS: dict[str, Event] = {
    "acceld.device.usage": Event(
        DeviceUsagePayload, "info", AGENT_BINARY,
        "every [notifications] usage_period seconds, the figures of the host's devices "
        "whose drivers have them"),
    "acceld.device.discovered": Event(
        DevicePayload, "info", CONDUCTOR_BINARY,
        "a report of the host's agent shows a device the inventory did not have"),
    "acceld.device.removed": Event(
        DevicePayload, "info", CONDUCTOR_BINARY,
        "a device vanished from its agent's report and, nothing holding it, was deleted "
        "from the inventory"),
    "acceld.device.state_change": Event(
        DeviceStatePayload, "info", CONDUCTOR_BINARY,
        "a device's life cycle state changed: an operator's ready/inactive request "
        "(installing, uninstalling) and its outcome (ready, inactive, error)"),
    "acceld.device.health_change": Event(
        DeviceHealthPayload, "warn", CONDUCTOR_BINARY,
        "a device's health life cycle or maintenance moved (a report's verdict, or an "
        "operator's quarantine, release, reset, drain or undrain, and a reset's outcome); "
        "lists the guests holding the device"),
    "acceld.arq.created": Event(
        ArqPayload, "info", API_BINARY,
        "an ARQ was created (one per requested unit of a device profile)"),
    "acceld.arq.bound": Event(
        ArqPayload, "info", CONDUCTOR_BINARY,
        "an ARQ is Bound to an attach handle (after any host work or programming)"),
    "acceld.arq.bind_failed": Event(
        ArqPayload, "error", CONDUCTOR_BINARY, "a bind of an ARQ ended BindFailed"),
    "acceld.arq.unbound": Event(
        ArqPayload, "info", f"{API_BINARY}, {CONDUCTOR_BINARY}",
        "an unbind request left an ARQ Unbound (from the API when its handle needs no "
        "host work, else from the conductor after the agent released it)"),
    "acceld.arq.deleted": Event(
        ArqDeletedPayload, "info", API_BINARY,
        "an ARQ was deleted (by uuid, or with its instance)"),
    "acceld.deployable.program.start": Event(
        ProgramPayload, "info", AGENT_BINARY,
        "the agent begins an FPGA program operation (image fetch, then programming)"),
    "acceld.deployable.program.end": Event(
        ProgramPayload, "info", AGENT_BINARY, "an FPGA program operation succeeded"),
    "acceld.deployable.program.error": Event(
        ProgramPayload, "error", AGENT_BINARY,
        "an FPGA program operation failed, timed out, or was cut by an agent restart"),
    "acceld.driver.failure": Event(
        DriverPayload, "error", AGENT_BINARY,
        "a driver the agent runs fails to load or to discover, where it did not before "
        "(its devices become health unknown)"),
}


def payload_classes() -> list[type[Payload]]:
    """Every payload class of :data:`EVENTS`, once each, in order."""
    return list(dict.fromkeys(event.payload for event in EVENTS.values()))


def render_schemas() -> str:
    """What docs/notification-schemas.json holds: every payload's schema by name, and
    every event type's payload and priority."""
    return json.dumps({
        "payloads": {cls.NAME: cls.schema() for cls in payload_classes()},
        "events": {name: {"payload": e.payload.NAME, "priority": e.priority.upper(),
                          "publisher": e.publisher, "when": e.when}
                   for name, e in EVENTS.items()}}, indent=2, sort_keys=True) + "\n"

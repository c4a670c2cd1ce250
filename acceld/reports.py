"""The agent -> conductor inventory report: a full snapshot of one host (every enabled
driver with the devices it found), frozen, versioned, validated on receipt. A device is
keyed by ``(driver, identity)``, a deployable by its name, a handle by its attach_info.

Schema versions (one line of history each; a test guards the list):

* 1: initial: host, epoch, seq, drivers[name, version, state, error, devices[...]]
* 2: adds provider_name, the name of the host's compute node provider in Placement
* 3: adds per driver ``explanation`` (checks, expected/found, skipped devices) and
  ``capabilities`` (``host_work``: its handles need prepare/release at bind; ``program``),
  and per device ``health`` {status ok|degraded|failed, reasons}
* 4: adds per attach handle an optional ``uuid`` (the driver names the handle: an MDEV
  handle's uuid is its mdev's, which Nova uses) and the attach type ``MIG``
* 5: adds per device an optional ``health.counters`` {name: count}: the driver's error
  counters since it started counting (``ecc``, ``xid``), from which the conductor tells
  a device whose errors rise (docs/health.md)
* 6: adds an optional ``compute_node_uuid``: the uuid of the host's compute node (Nova's
  ``<state_path>/compute_id``), which is its provider's uuid in Placement"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from acceld import exception, states, validation

SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6)
SCHEMA_VERSION = SCHEMA_VERSIONS[-1]

_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_UUID_PATTERN = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_REASON = {"type": "string", "maxLength": 1000}

# Device health as drivers report it (acceld.agent.drivers.base.HEALTH_STATES).
DEVICE_HEALTH = (states.HEALTH_OK, states.HEALTH_DEGRADED, states.HEALTH_FAILED)
# What a driver may declare it does beyond discovery.
CAP_HOST_WORK = "host_work"      # attach handles need prepare/release on the host at bind
CAP_PROGRAM = "program"          # devices can be loaded with an image (FPGAs)
CAPABILITIES = (CAP_HOST_WORK, CAP_PROGRAM)
# Error counters a driver may report per device (cumulative; docs/health.md).
COUNTER_ECC = "ecc"              # memory ECC errors (corrected and uncorrected)
COUNTER_XID = "xid"              # critical XID events (NVIDIA GPUs)
HEALTH_COUNTERS = (COUNTER_ECC, COUNTER_XID)

FUNCTION_TRAIT_PREFIX = "CUSTOM_FPGA_FUNCTION_ID_"


# The image reference of a program operation that names a function, not an image: the
# agent asks Glance for the one image whose ``accel:function_id`` property is it.
FUNCTION_IMAGE_PREFIX = "function:"


def function_trait(function_id: str) -> str:
    """The trait of a function loaded in a device (an AFU id, an xclbin UUID): what a
    device profile's ``accel:function_id`` is compared with, and Placement shows."""
    return FUNCTION_TRAIT_PREFIX + re.sub(r"[^A-Z0-9_]", "", function_id.upper())


def canonical_json(value: Any) -> str:
    """The one JSON text of ``value``: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _closed(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """The schema of an object with only ``properties``, ``required`` among them."""
    return {"type": "object", "required": required, "additionalProperties": False,
            "properties": properties}


_HANDLE = _closed(["attach_type", "attach_info"], {
    "attach_type": {"type": "string", "enum": list(states.ATTACH_TYPES)},
    "attach_info": _STR_MAP,
    "uuid": {"type": "string", "pattern": _UUID_PATTERN}})
_DEPLOYABLE = _closed(["name", "num_accelerators", "attributes", "attach_handles"], {
    "name": {"type": "string", "minLength": 1, "maxLength": 255},
    "num_accelerators": {"type": "integer", "minimum": 0},
    "attributes": _STR_MAP,
    "attach_handles": {"type": "array", "items": _HANDLE}})
_DEVICE = _closed(["identity", "type", "vendor", "model", "controlpath", "deployables"], {
    "identity": {"type": "string", "minLength": 1, "maxLength": 255},
    "type": {"type": "string", "enum": list(states.DEVICE_TYPES)},
    "vendor": {"type": "string", "maxLength": 255},
    "model": {"type": "string", "maxLength": 255},
    "name": {"type": "string", "maxLength": 255},
    "std_board_info": {"type": "object"},
    "vendor_board_info": {"type": "object"},
    "controlpath": _closed(["type", "info"], {"type": {"type": "string"}, "info": _STR_MAP}),
    "deployables": {"type": "array", "items": _DEPLOYABLE},
    "health": _closed(["status"], {
        "status": {"enum": list(DEVICE_HEALTH)},
        "reasons": {"type": "array", "items": _REASON, "maxItems": 50},
        "counters": _closed([], {name: {"type": "integer", "minimum": 0}
                                 for name in HEALTH_COUNTERS})})})
_EXPLANATION = _closed(["checks", "found", "skipped"], {
    "checks": {"type": "array", "maxItems": 200, "items": _closed(["name", "ok"], {
        "name": {"type": "string", "minLength": 1, "maxLength": 255},
        "ok": {"type": "boolean"}, "detail": _REASON})},
    "expected": {"type": ["integer", "null"], "minimum": 0},
    "found": {"type": "integer", "minimum": 0},
    "skipped": {"type": "array", "maxItems": 1000, "items": _closed(["address", "reason"], {
        "address": {"type": "string", "maxLength": 255}, "reason": _REASON})}})
_DRIVER = _closed(["name", "version", "state", "devices"], {
    "name": {"type": "string", "minLength": 1, "maxLength": 64},
    "version": {"type": "string", "maxLength": 64},
    "state": {"type": "string", "enum": list(states.DRIVER_STATES)},
    "error": {"type": ["string", "null"], "maxLength": 2000},
    "devices": {"type": "array", "items": _DEVICE},
    "explanation": {"oneOf": [{"type": "null"}, _EXPLANATION]},
    "capabilities": {"type": "array", "uniqueItems": True,
                     "items": {"enum": list(CAPABILITIES)}}})
REPORT_SCHEMA = _closed(["schema_version", "host", "epoch", "seq", "drivers"], {
    "schema_version": {"type": "integer", "enum": list(SCHEMA_VERSIONS)},
    "host": {"type": "string", "minLength": 1, "maxLength": 255},
    "epoch": {"type": "string", "minLength": 1, "maxLength": 64},
    "seq": {"type": "integer", "minimum": 0},
    "agent_version": {"type": "string", "maxLength": 64},
    "provider_name": {"type": "string", "minLength": 1, "maxLength": 255},
    "compute_node_uuid": {"type": "string", "pattern": _UUID_PATTERN},
    "drivers": {"type": "array", "items": _DRIVER}})


def _frozen_map(value: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((value or {}).items()))


@dataclasses.dataclass(frozen=True)
class AttachHandle:
    attach_type: str
    attach_info: tuple[tuple[str, str], ...]
    uuid: str | None = None         # the driver's name for it (None: derived by acceld)

    @property
    def info_key(self) -> str:
        """The canonical JSON of ``attach_info``: the handle's identity within a deployable."""
        return canonical_json(dict(self.attach_info))


@dataclasses.dataclass(frozen=True)
class Deployable:
    name: str
    num_accelerators: int
    attributes: tuple[tuple[str, str], ...] = ()
    attach_handles: tuple[AttachHandle, ...] = ()


@dataclasses.dataclass(frozen=True)
class Device:
    identity: str
    type: str
    vendor: str
    model: str
    controlpath_type: str
    controlpath_info: tuple[tuple[str, str], ...]
    name: str = ""
    std_board_info: tuple[tuple[str, Any], ...] = ()
    vendor_board_info: tuple[tuple[str, Any], ...] = ()
    deployables: tuple[Deployable, ...] = ()
    health: str = states.HEALTH_OK             # one of DEVICE_HEALTH
    health_reasons: tuple[str, ...] = ()
    health_counters: tuple[tuple[str, int], ...] = ()     # sorted (name, count)


@dataclasses.dataclass(frozen=True)
class DriverReport:
    name: str
    version: str
    state: str = states.DRIVER_INSTALLED
    error: str | None = None
    devices: tuple[Device, ...] = ()
    # Explanation.to_dict() of the last discovery (None: the driver explains nothing)
    explanation: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)
    capabilities: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class InventoryReport:
    host: str
    epoch: str
    seq: int
    drivers: tuple[DriverReport, ...] = ()
    schema_version: int = SCHEMA_VERSION
    agent_version: str = ""
    provider_name: str = ""
    compute_node_uuid: str = ""     # "" where the agent found none

    def to_dict(self) -> dict[str, Any]:
        data = {
            "schema_version": self.schema_version, "host": self.host, "epoch": self.epoch,
            "seq": self.seq, "agent_version": self.agent_version,
            "drivers": [_driver_to_dict(d) for d in self.drivers],
        }
        if self.provider_name:
            data["provider_name"] = self.provider_name
        if self.compute_node_uuid:
            data["compute_node_uuid"] = self.compute_node_uuid
        return data

    def content_digest(self) -> str:
        """SHA-256 of what the report says about the host (not of epoch/seq)."""
        body = canonical_json([self.provider_name or self.host, self.compute_node_uuid,
                               self.to_dict()["drivers"]])
        return hashlib.sha256(body.encode()).hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InventoryReport:
        """Validate a received report and build it; raises InvalidReport."""
        problem = validation.first_problem(data, REPORT_SCHEMA)
        if problem is not None:
            raise exception.InvalidReport(f"invalid report at {problem}")
        return cls(host=data["host"], epoch=data["epoch"], seq=data["seq"],
                   schema_version=data["schema_version"],
                   agent_version=data.get("agent_version", ""),
                   provider_name=data.get("provider_name", ""),
                   compute_node_uuid=data.get("compute_node_uuid", ""),
                   drivers=tuple(_driver_from_dict(d) for d in data["drivers"]))


def _driver_to_dict(d: DriverReport) -> dict[str, Any]:
    return {"name": d.name, "version": d.version, "state": d.state, "error": d.error,
            "devices": [_device_to_dict(dev) for dev in d.devices],
            "explanation": None if d.explanation is None else dict(d.explanation),
            "capabilities": list(d.capabilities)}


def _device_to_dict(dev: Device) -> dict[str, Any]:
    return {
        "identity": dev.identity, "type": dev.type, "vendor": dev.vendor, "model": dev.model,
        "name": dev.name, "std_board_info": dict(dev.std_board_info),
        "vendor_board_info": dict(dev.vendor_board_info),
        "controlpath": {"type": dev.controlpath_type, "info": dict(dev.controlpath_info)},
        "deployables": [
            {"name": dep.name, "num_accelerators": dep.num_accelerators,
             "attributes": dict(dep.attributes),
             "attach_handles": [_handle_to_dict(h) for h in dep.attach_handles]}
            for dep in dev.deployables],
        "health": _health_to_dict(dev),
    }


def _health_to_dict(dev: Device) -> dict[str, Any]:
    """The device's health; ``counters`` only where the driver counts (a report without
    them is the same text as a version 4 one, so its digest does not change)."""
    out: dict[str, Any] = {"status": dev.health, "reasons": list(dev.health_reasons)}
    if dev.health_counters:
        out["counters"] = dict(dev.health_counters)
    return out


def _handle_to_dict(h: AttachHandle) -> dict[str, Any]:
    out: dict[str, Any] = {"attach_type": h.attach_type, "attach_info": dict(h.attach_info)}
    if h.uuid is not None:
        out["uuid"] = h.uuid
    return out


def _driver_from_dict(d: Mapping[str, Any]) -> DriverReport:
    return DriverReport(name=d["name"], version=d["version"], state=d["state"],
                        error=d.get("error"),
                        devices=tuple(make_device(**dev) for dev in d["devices"]),
                        explanation=d.get("explanation"),
                        capabilities=tuple(d.get("capabilities", ())))


def make_device(*, identity: str, type: str, vendor: str, model: str,
                controlpath: Mapping[str, Any], deployables: list[Mapping[str, Any]] = (),
                name: str = "", std_board_info: Mapping[str, Any] | None = None,
                vendor_board_info: Mapping[str, Any] | None = None,
                health: Mapping[str, Any] | None = None) -> Device:
    """A Device from plain data (drivers' and the wire's); ``health``: {status, reasons,
    counters?}."""
    health = health or {}
    return Device(
        identity=identity, type=type, vendor=vendor, model=model, name=name,
        controlpath_type=controlpath["type"],
        controlpath_info=_frozen_map(controlpath["info"]),
        std_board_info=_frozen_map(std_board_info),
        vendor_board_info=_frozen_map(vendor_board_info),
        deployables=tuple(
            Deployable(name=dep["name"], num_accelerators=dep["num_accelerators"],
                       attributes=_frozen_map(dep.get("attributes")),
                       attach_handles=tuple(
                           AttachHandle(h["attach_type"], _frozen_map(h["attach_info"]),
                                        h.get("uuid"))
                           for h in dep.get("attach_handles", ())))
            for dep in deployables),
        health=health.get("status", states.HEALTH_OK),
        health_reasons=tuple(health.get("reasons", ())),
        health_counters=_frozen_map(health.get("counters")),
    )

"""Scenario files: a timed list of faults the simulator plays on its fleet.

A scenario is JSON: ``{"seed": 0, "faults": [FAULT, ...]}``. Every fault has ``at``
(seconds after the simulator started) and ``kind``; most target hosts, by ``hosts``
(names), ``count`` (that many hosts) or ``fraction`` (that share of the fleet, at least
one), else every host; ``count`` and ``fraction`` pick the same hosts for the same
``seed``. Device faults pick ``devices`` devices per host (default 1): ``device`` (a PCI
address), else of ``device_kind`` (a mix kind), else any (health faults: any GPU).
The kinds and their own fields are in :data:`KIND_FIELDS`; ``docs/simulator.md`` has
an example.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Mapping
from typing import Any

from acceld import states, validation
from acceld.sim import devices as devmod

AGENT_CRASH = "agent_crash"
REBOOT = "reboot"
UNPLUG = "unplug"
XID_STORM = "xid_storm"
ECC_STORM = "ecc_storm"
FAILED_RESET = "failed_reset"
SLOW_BUS = "slow_bus"
LOST_BUS = "lost_bus"
KILL_CONDUCTOR = "kill_conductor"

_TARGET = ("hosts", "count", "fraction")
_DEVICES = ("device", "device_kind", "devices")
# kind -> its own fields beyond at/kind, with their defaults (None: unset)
KIND_FIELDS: dict[str, dict[str, Any]] = {
    AGENT_CRASH: {"down": 5.0, "keep_journal": False},
    REBOOT: {"down": 30.0},
    UNPLUG: {"back_after": None},
    XID_STORM: {"xid": 79, "duration": 10.0},
    ECC_STORM: {"errors": 8, "status": states.HEALTH_FAILED, "duration": 10.0},
    FAILED_RESET: {},
    SLOW_BUS: {"delay": 2.0, "duration": None},
    LOST_BUS: {"duration": 10.0},
    KILL_CONDUCTOR: {"pid": None, "pid_file": None},
}
DEVICE_FAULTS = (UNPLUG, XID_STORM, ECC_STORM, FAILED_RESET)
HEALTH_FAULTS = (XID_STORM, ECC_STORM, FAILED_RESET)

_SECONDS = {"type": "number", "minimum": 0}
_FAULT = {
    "type": "object", "required": ["at", "kind"], "additionalProperties": False,
    "properties": {
        "at": _SECONDS, "kind": {"enum": list(KIND_FIELDS)},
        "hosts": {"type": "array", "items": {"type": "string", "minLength": 1},
                  "minItems": 1},
        "count": {"type": "integer", "minimum": 1},
        "fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "device": {"type": "string", "minLength": 1},
        "device_kind": {"enum": list(devmod.KINDS)},
        "devices": {"type": "integer", "minimum": 1},
        "down": _SECONDS, "keep_journal": {"type": "boolean"},
        "back_after": {"type": ["number", "null"], "minimum": 0},
        "duration": {"type": ["number", "null"], "minimum": 0},
        "xid": {"type": "integer", "minimum": 0},
        "errors": {"type": "integer", "minimum": 1},
        "status": {"enum": [states.HEALTH_DEGRADED, states.HEALTH_FAILED]},
        "delay": _SECONDS,
        "pid": {"type": "integer", "minimum": 1},
        "pid_file": {"type": "string", "minLength": 1},
    }}
SCHEMA = {"type": "object", "required": ["faults"], "additionalProperties": False,
          "properties": {"seed": {"type": "integer"},
                         "faults": {"type": "array", "items": _FAULT}}}


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault: ``params`` holds the kind's fields (defaults filled in) and its
    device selection."""

    index: int
    at: float
    kind: str
    hosts: tuple[str, ...] | None = None
    count: int | None = None
    fraction: float | None = None
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def targets(self, names: list[str], seed: int) -> list[str]:
        """The hosts this fault hits, among ``names`` (the fleet, in order)."""
        if self.kind == KILL_CONDUCTOR:
            return []
        if self.hosts is not None:
            return list(self.hosts)
        if self.count is None and self.fraction is None:
            return list(names)
        wanted = self.count if self.count is not None else max(
            1, round(self.fraction * len(names)))
        rng = random.Random(f"{seed}|{self.index}")
        chosen = set(rng.sample(names, min(wanted, len(names))))
        return [name for name in names if name in chosen]


@dataclasses.dataclass(frozen=True)
class Scenario:
    faults: tuple[Fault, ...] = ()
    seed: int = 0

    def check_hosts(self, names: list[str]) -> None:
        """ValueError when a fault names a host the fleet does not have."""
        known = set(names)
        for fault in self.faults:
            unknown = sorted(set(fault.hosts or ()) - known)
            if unknown:
                raise ValueError(f"fault {fault.index} ({fault.kind}) names hosts the fleet "
                                 f"does not have: {', '.join(unknown[:5])}")


def parse(data: Any) -> Scenario:
    """A validated scenario from its JSON data; ValueError saying what is wrong."""
    problem = validation.first_problem(data, SCHEMA)
    if problem is not None:
        raise ValueError(f"scenario at {problem}")
    faults = tuple(_fault(i, raw) for i, raw in enumerate(data["faults"]))
    return Scenario(faults=tuple(sorted(faults, key=lambda f: (f.at, f.index))),
                    seed=data.get("seed", 0))


def load(path: str) -> Scenario:
    with open(path, encoding="utf-8") as f:
        return parse(json.load(f))


def _fault(index: int, raw: Mapping[str, Any]) -> Fault:
    kind = raw["kind"]
    allowed = {"at", "kind", *KIND_FIELDS[kind]}
    if kind != KILL_CONDUCTOR:
        allowed.update(_TARGET)
    if kind in DEVICE_FAULTS:
        allowed.update(_DEVICES)
    extra = sorted(set(raw) - allowed)
    if extra:
        raise ValueError(f"fault {index} ({kind}) does not take {', '.join(extra)}")
    if sum(key in raw for key in _TARGET) > 1:
        raise ValueError(f"fault {index} ({kind}): give one of hosts, count, fraction")
    if "device" in raw and "device_kind" in raw:
        raise ValueError(f"fault {index} ({kind}): give device or device_kind, not both")
    if kind == KILL_CONDUCTOR and ("pid" in raw) == ("pid_file" in raw):
        raise ValueError(f"fault {index} ({kind}) needs one of pid, pid_file")
    params = {**KIND_FIELDS[kind], **{k: v for k, v in raw.items()
                                      if k in KIND_FIELDS[kind] or k in _DEVICES}}
    if kind in DEVICE_FAULTS:
        params.setdefault("devices", 1)
    return Fault(index=index, at=float(raw["at"]), kind=kind,
                 hosts=tuple(raw["hosts"]) if "hosts" in raw else None,
                 count=raw.get("count"), fraction=raw.get("fraction"), params=params)

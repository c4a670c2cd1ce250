"""Pure diff of an inventory report against what the database holds for that host:
``diff(current, report)`` returns a :class:`Plan` that ``objects.inventory`` applies in
one transaction. The rules:

* identity: a device is ``(driver, identity)``, a deployable its name within the device,
  an attach handle its canonical ``attach_info`` JSON within the deployable;
* a failed driver marks its devices ``unknown`` and changes nothing else; an uninstalled
  one reports no devices; a reported device takes the health its driver reports;
* a vanished device is deleted unless held (attached or allocated): then it is kept and
  marked ``missing``, and becomes ``ok`` again when it comes back;
* ``in_use`` of a handle is never overwritten; an unchanged report yields an empty plan;
* health life cycle (:class:`HealthRules`): a healthy device whose error counters rose
  by a threshold since the last applied report, or whose driver health just became
  degraded or failed, becomes suspect (or quarantined, by configuration)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from acceld import reports, states
from acceld.reports import canonical_json


@dataclasses.dataclass
class CurrentHandle:
    id: int
    attach_type: str
    in_use: bool


@dataclasses.dataclass
class CurrentDeployable:
    id: int
    num_accelerators: int
    attributes: dict[str, tuple[int, str]]       # key -> (attribute id, value)
    handles: dict[str, CurrentHandle]            # attach_info JSON -> handle
    held: bool = False


@dataclasses.dataclass
class CurrentDevice:
    id: int
    driver: str
    identity: str
    fields: dict[str, Any]                       # the reported columns, as stored
    health: str
    held: bool
    cpid_id: int
    deployables: dict[str, CurrentDeployable]
    lifecycle: str = states.LIFECYCLE_HEALTHY


@dataclasses.dataclass(frozen=True)
class HealthRules:
    """When a report takes a healthy device out of ``healthy`` (docs/health.md).

    ``deltas``: per counter (reports.HEALTH_COUNTERS) the rise since the last applied
    report that makes the device suspect (0 or absent: not watched); ``driver_health``:
    whether a driver's health turning degraded or failed does too; ``target``: the state
    such a device enters (suspect, or quarantined at once)."""

    deltas: tuple[tuple[str, int], ...] = ()
    driver_health: bool = True
    target: str = states.LIFECYCLE_SUSPECT

    def reasons(self, stored_counters: str | None, health_before: str,
                dev: reports.Device) -> list[str]:
        """Why ``dev`` (as now reported) is no longer healthy; empty while it is. A
        counter lower than before (the driver restarted counting) is a new baseline."""
        before = json.loads(stored_counters or "{}")
        now = dict(dev.health_counters)
        why = [f"{name} errors rose by {now[name] - before[name]} (from {before[name]} to "
               f"{now[name]}; threshold {delta})"
               for name, delta in self.deltas
               if delta > 0 and name in now and name in before
               and now[name] - before[name] >= delta]
        if self.driver_health and dev.health != health_before and dev.health in (
                states.HEALTH_DEGRADED, states.HEALTH_FAILED):
            why.append(f"the driver reports it {dev.health}"
                       + (f": {'; '.join(dev.health_reasons)}" if dev.health_reasons else ""))
        return why


@dataclasses.dataclass
class CurrentDriver:
    version: str
    state: str
    error: str | None
    device_count: int
    explanation: str | None = None               # canonical JSON, as stored
    capabilities: str | None = None              # canonical JSON list, as stored


@dataclasses.dataclass
class HostInventory:
    host: str
    devices: dict[tuple[str, str], CurrentDevice]
    drivers: dict[str, CurrentDriver]


@dataclasses.dataclass
class Plan:
    """Everything to write for one report; empty when the report changed nothing."""

    add_devices: list[tuple[str, reports.Device]] = dataclasses.field(default_factory=list)
    update_devices: list[tuple[int, dict[str, Any]]] = dataclasses.field(default_factory=list)
    delete_devices: list[int] = dataclasses.field(default_factory=list)
    set_health: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    add_deployables: list[tuple[int, int, reports.Deployable]] = dataclasses.field(
        default_factory=list)                     # (device id, cpid id, deployable)
    update_deployables: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    delete_deployables: list[int] = dataclasses.field(default_factory=list)
    add_attributes: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)
    update_attributes: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    delete_attributes: list[int] = dataclasses.field(default_factory=list)
    add_handles: list[tuple[int, int, reports.AttachHandle]] = dataclasses.field(
        default_factory=list)                     # (deployable id, cpid id, handle)
    update_handles: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    delete_handles: list[int] = dataclasses.field(default_factory=list)
    add_drivers: list[reports.DriverReport] = dataclasses.field(default_factory=list)
    update_drivers: list[reports.DriverReport] = dataclasses.field(default_factory=list)
    delete_drivers: list[str] = dataclasses.field(default_factory=list)
    # (device id, life-cycle state it enters, why): HealthRules' verdicts
    lifecycle: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)

    def is_empty(self) -> bool:
        return not any(getattr(self, f.name) for f in dataclasses.fields(self))


def device_fields(dev: reports.Device) -> dict[str, Any]:
    """The device columns a report determines, in their stored form."""
    return {
        "type": dev.type, "vendor": dev.vendor, "model": dev.model,
        "std_board_info": canonical_json(dict(dev.std_board_info)),
        "vendor_board_info": canonical_json(dict(dev.vendor_board_info)),
        "cpid_type": dev.controlpath_type,
        "cpid_info": canonical_json(dict(dev.controlpath_info)),
        "health_reasons": canonical_json(list(dev.health_reasons)),
        "health_counters": canonical_json(dict(dev.health_counters))
        if dev.health_counters else None,
    }


def driver_fields(drv: reports.DriverReport) -> dict[str, Any]:
    """The ``driver_states`` columns a report determines, in their stored form."""
    return {"version": drv.version, "state": drv.state, "error": drv.error,
            "device_count": len(drv.devices),
            "explanation": None if drv.explanation is None
            else canonical_json(dict(drv.explanation)),
            "capabilities": canonical_json(sorted(drv.capabilities))
            if drv.capabilities else None}


def diff(current: HostInventory, report: reports.InventoryReport,
         rules: HealthRules | None = None) -> Plan:
    """The plan; ``rules``: when a device leaves ``healthy`` (None: never from a report)."""
    plan = Plan()
    reported = {d.name: d for d in report.drivers}
    _diff_drivers(current, reported, plan)
    seen: set[tuple[str, str]] = set()
    for drv in report.drivers:
        if drv.state == states.DRIVER_FAILED:
            continue
        for dev in drv.devices:
            key = (drv.name, dev.identity)
            if key in seen:
                continue  # a driver reporting one identity twice: keep the first
            seen.add(key)
            existing = current.devices.get(key)
            if existing is None:
                plan.add_devices.append((drv.name, dev))
            else:
                _diff_device(existing, dev, plan)
                if rules is not None and existing.lifecycle == states.LIFECYCLE_HEALTHY:
                    why = rules.reasons(existing.fields.get("health_counters"),
                                        existing.health, dev)
                    if why:
                        plan.lifecycle.append((existing.id, rules.target, "; ".join(why)))
    for key, existing in current.devices.items():
        drv = reported.get(key[0])
        if drv is not None and drv.state == states.DRIVER_FAILED:
            if existing.health != states.HEALTH_UNKNOWN:
                plan.set_health.append((existing.id, states.HEALTH_UNKNOWN))
        elif key not in seen:
            if existing.held:
                if existing.health != states.HEALTH_MISSING:
                    plan.set_health.append((existing.id, states.HEALTH_MISSING))
            else:
                plan.delete_devices.append(existing.id)
    return plan


def _diff_drivers(current: HostInventory, reported: dict[str, reports.DriverReport],
                  plan: Plan) -> None:
    for name, drv in reported.items():
        have = current.drivers.get(name)
        if have is None:
            plan.add_drivers.append(drv)
        elif dataclasses.asdict(have) != driver_fields(drv):
            plan.update_drivers.append(drv)
    plan.delete_drivers.extend(sorted(set(current.drivers) - set(reported)))


def _diff_device(existing: CurrentDevice, dev: reports.Device, plan: Plan) -> None:
    wanted = device_fields(dev)
    changed = {k: v for k, v in wanted.items() if existing.fields.get(k) != v}
    if changed:
        plan.update_devices.append((existing.id, changed))
    if existing.health != dev.health:
        plan.set_health.append((existing.id, dev.health))
    reported = {dep.name: dep for dep in dev.deployables}
    for name, dep in reported.items():
        have = existing.deployables.get(name)
        if have is None:
            plan.add_deployables.append((existing.id, existing.cpid_id, dep))
            continue
        if have.num_accelerators != dep.num_accelerators:
            plan.update_deployables.append((have.id, dep.num_accelerators))
        _diff_attributes(have, dep, plan)
        _diff_handles(have, dep, existing.cpid_id, plan)
    for name, have in existing.deployables.items():
        if name not in reported and not have.held:
            plan.delete_deployables.append(have.id)


def _diff_attributes(have: CurrentDeployable, dep: reports.Deployable, plan: Plan) -> None:
    wanted = dict(dep.attributes)
    for key, value in wanted.items():
        if key not in have.attributes:
            plan.add_attributes.append((have.id, key, value))
        elif have.attributes[key][1] != value:
            plan.update_attributes.append((have.attributes[key][0], value))
    plan.delete_attributes.extend(attr_id for key, (attr_id, _v) in have.attributes.items()
                                  if key not in wanted)


def _diff_handles(have: CurrentDeployable, dep: reports.Deployable, cpid_id: int,
                  plan: Plan) -> None:
    wanted = {h.info_key: h for h in dep.attach_handles}
    for key, handle in wanted.items():
        current = have.handles.get(key)
        if current is None:
            plan.add_handles.append((have.id, cpid_id, handle))
        elif current.attach_type != handle.attach_type:
            plan.update_handles.append((current.id, handle.attach_type))
    plan.delete_handles.extend(h.id for key, h in have.handles.items()
                               if key not in wanted and not h.in_use)

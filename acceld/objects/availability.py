"""What "would a device profile fit, and where" is computed from: the whole fleet's
deployables with their device, attributes and handle counts, and each host's agent
liveness, failed drivers and Placement sync state, as plain rows.

One read transaction of six set-based statements, whatever the fleet's size
(``conductor.availability`` decides from the rows; nothing here knows the rules).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from sqlalchemy import case, func, select

from acceld import AGENT_BINARY, states
from acceld.db import models as m
from acceld.db.api import Database

_GUEST = m.AttachHandle.attach_type.in_(sorted(states.GUEST_ATTACH_TYPES))


@dataclasses.dataclass(frozen=True)
class HostRow:
    host: str
    agent_alive: bool | None          # None: no agent row
    failed_drivers: frozenset[str]
    placement_in_sync: bool | None    # None: never synced (or Placement is off)


@dataclasses.dataclass(frozen=True)
class Fleet:
    hosts: dict[str, HostRow]
    providers: list[dict[str, Any]]    # fields of conductor.availability.ProviderRow


_DEPLOYABLES = (
    select(m.Deployable.id, m.Deployable.rp_uuid, m.Deployable.name,
           m.Deployable.num_accelerators, m.Device.hostname, m.Device.uuid.label("dev_uuid"),
           m.Device.vendor, m.Device.model, m.Device.driver_name, m.Device.state,
           m.Device.status, m.Device.health, m.Device.lifecycle, m.Device.maintenance)
    .join(m.Device, m.Device.id == m.Deployable.device_id)
    .where(m.Device.hostname.is_not(None), m.Deployable.rp_uuid.is_not(None))
    .order_by(m.Device.hostname, m.Deployable.id))
_ATTRIBUTES = (select(m.Attribute.deployable_id, m.Attribute.key, m.Attribute.value)
               .order_by(m.Attribute.deployable_id, m.Attribute.key))
_HANDLES = (select(m.AttachHandle.deployable_id,
                   func.sum(case((_GUEST, 1), else_=0)).label("guest"),
                   func.sum(case((_GUEST & m.AttachHandle.in_use.is_(False), 1), else_=0))
                   .label("free"),
                   func.sum(case((m.AttachHandle.in_use.is_(True), 1), else_=0))
                   .label("in_use"))
            .group_by(m.AttachHandle.deployable_id))
_AGENTS = select(m.Service.host, m.Service.last_seen_at).where(
    m.Service.binary == AGENT_BINARY)
_FAILED_DRIVERS = select(m.DriverState.host, m.DriverState.name).where(
    m.DriverState.state == states.DRIVER_FAILED)
_SYNC = select(m.PlacementSync.host, m.PlacementSync.in_sync)


def read_fleet(db: Database, down_time: int) -> Fleet:
    """Every host with devices or an agent, and every deployable with a provider; an
    agent is alive when it was heard from in the last ``down_time`` seconds."""
    now = m.utcnow()
    with db.reader() as s:
        deps = s.execute(_DEPLOYABLES).all()
        attrs: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for a in s.execute(_ATTRIBUTES):
            attrs[a.deployable_id].append((a.key, a.value))
        handles = {h.deployable_id: h for h in s.execute(_HANDLES)}
        alive = {r.host: (now - r.last_seen_at).total_seconds() <= down_time
                 for r in s.execute(_AGENTS)}
        failed: dict[str, set[str]] = defaultdict(set)
        for r in s.execute(_FAILED_DRIVERS):
            failed[r.host].add(r.name)
        synced = {r.host: bool(r.in_sync) for r in s.execute(_SYNC)}
    providers = [dict(
        host=d.hostname, rp_uuid=d.rp_uuid, name=d.name, num_accelerators=d.num_accelerators,
        attributes=tuple(attrs.get(d.id, ())), vendor=d.vendor or "", model=d.model or "",
        device_uuid=d.dev_uuid, driver=d.driver_name or "", state=d.state, status=d.status,
        health=d.health, lifecycle=d.lifecycle, maintenance=bool(d.maintenance),
        **_counts(handles.get(d.id))) for d in deps]
    names = {p["host"] for p in providers} | set(alive)
    hosts = {h: HostRow(host=h, agent_alive=alive.get(h), failed_drivers=frozenset(failed[h]),
                        placement_in_sync=synced.get(h)) for h in sorted(names)}
    return Fleet(hosts=hosts, providers=providers)


def _counts(row: Any) -> dict[str, int]:
    if row is None:
        return {"guest_handles": 0, "free_guest_handles": 0, "in_use": 0}
    return {"guest_handles": int(row.guest or 0), "free_guest_handles": int(row.free or 0),
            "in_use": int(row.in_use or 0)}

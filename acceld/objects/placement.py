"""What Placement sync reads from and records in the database."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections import defaultdict
from typing import Any

from sqlalchemy import insert, select, update

from acceld import AGENT_BINARY, states
from acceld.db import models as m
from acceld.db.api import Database


@dataclasses.dataclass(frozen=True)
class SyncState:
    host: str
    compute_rp_uuid: str | None
    provider_digests: dict[str, str]
    provider_generations: dict[str, int]   # after the last successful sync
    in_sync: bool
    last_synced_at: datetime.datetime | None
    last_attempt_at: datetime.datetime | None
    last_error: str | None
    conflicts: list[dict[str, Any]]
    next_retry_at: datetime.datetime | None


@dataclasses.dataclass(frozen=True)
class HostInputs:
    host: str
    provider_name: str
    compute_node_uuid: str | None       # as the agent reported it (None: look up by name)
    rows: list[dict[str, Any]]          # fields of placement_plan.DeployableRow
    state: SyncState | None


def _state(row: m.PlacementSync | None) -> SyncState | None:
    if row is None:
        return None
    return SyncState(**{f.name: getattr(row, f.name) for f in dataclasses.fields(SyncState)}
                     | {"provider_digests": json.loads(row.provider_digests or "{}"),
                        "provider_generations": json.loads(row.provider_generations or "{}"),
                        "in_sync": bool(row.in_sync),
                        "conflicts": json.loads(row.conflicts or "[]")})


def host_inputs(db: Database, host: str) -> HostInputs:
    """The host's deployables as plain rows, its compute node (name and reported uuid)
    and sync state. Schedulable: a usable device and handles Nova attaches (a bind
    refuses others, e.g. MIG instances)."""
    with db.reader() as s:
        devs = {d.id: d for d in s.execute(select(m.Device).where(m.Device.hostname == host))
                .scalars()}
        deps = list(s.execute(select(m.Deployable).where(m.Deployable.device_id.in_(devs)))
                    .scalars()) if devs else []
        attrs: dict[int, list[tuple[str, str]]] = defaultdict(list)
        if deps:
            for a in s.execute(select(m.Attribute.deployable_id, m.Attribute.key,
                                      m.Attribute.value)
                               .where(m.Attribute.deployable_id.in_([d.id for d in deps]))):
                attrs[a.deployable_id].append((a.key, a.value))
        guest_ready = set(s.execute(
            select(m.AttachHandle.deployable_id).distinct()
            .where(m.AttachHandle.deployable_id.in_([d.id for d in deps]),
                   m.AttachHandle.attach_type.in_(states.GUEST_ATTACH_TYPES))).scalars()) \
            if deps else set()
        provider, node = s.execute(select(m.Service.provider_name, m.Service.compute_node_uuid)
                                   .where(m.Service.host == host,
                                          m.Service.binary == AGENT_BINARY)).first() \
            or (None, None)
        state = _state(s.execute(select(m.PlacementSync).where(m.PlacementSync.host == host))
                       .scalar_one_or_none())
    rows = [dict(rp_uuid=dep.rp_uuid, name=dep.name, num_accelerators=dep.num_accelerators,
                 attributes=tuple(sorted(attrs.get(dep.id, []))), vendor=dev.vendor or "",
                 model=dev.model or "", schedulable=dep.id in guest_ready and not
                 states.unusable_reasons(dev.state, dev.status, dev.health,
                                         dev.lifecycle, bool(dev.maintenance)))
            for dep in deps for dev in [devs[dep.device_id]]]
    return HostInputs(host=host, provider_name=provider or host, compute_node_uuid=node,
                      rows=rows, state=state)


def save_state(db: Database, host: str, *, compute_rp_uuid: str | None,
               provider_digests: dict[str, str], provider_generations: dict[str, int],
               in_sync: bool, error: str | None, conflicts: list[dict[str, Any]],
               synced: bool, retry_in: float | None = None) -> None:
    """``retry_in``: seconds until this host is tried again (None: no retry)."""
    now = m.utcnow()
    values: dict[str, Any] = dict(
        compute_rp_uuid=compute_rp_uuid, in_sync=in_sync, last_error=error,
        provider_digests=json.dumps(provider_digests, sort_keys=True),
        provider_generations=json.dumps(provider_generations, sort_keys=True),
        conflicts=json.dumps(conflicts, sort_keys=True), last_attempt_at=now,
        next_retry_at=None if retry_in is None else now + datetime.timedelta(
            seconds=retry_in))
    if synced:
        values["last_synced_at"] = now
    with db.writer() as s:
        res = s.execute(update(m.PlacementSync).where(m.PlacementSync.host == host)
                        .values(**values))
        if res.rowcount == 0:
            s.execute(insert(m.PlacementSync).values(host=host, created_at=now, **values))



def list_states(db: Database) -> list[dict[str, Any]]:
    with db.reader() as s:
        rows = s.execute(select(m.PlacementSync).order_by(m.PlacementSync.host)).scalars()
        return [dataclasses.asdict(_state(r)) for r in rows]


def hosts(db: Database) -> list[str]:
    """Every host with devices or a sync record (its providers may need cleaning up)."""
    with db.reader() as s:
        with_devices = set(s.execute(select(m.Device.hostname)
                                     .where(m.Device.hostname.is_not(None)).distinct())
                           .scalars())
        synced = set(s.execute(select(m.PlacementSync.host)).scalars())
    return sorted(with_devices | synced)

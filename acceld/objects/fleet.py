"""Fleet counts for the metrics endpoint: a fixed three aggregate statements in one read
transaction, whatever the size of the fleet (never a statement per device or host)."""

from __future__ import annotations

import dataclasses
import datetime

from sqlalchemy import case, distinct, func, select

from acceld.db import models as m
from acceld.db.api import Database

_DEV = m.Device.__table__
_DEP = m.Deployable.__table__
_ARQ = m.ExtendedAcceleratorRequest.__table__
_SVC = m.Service.__table__


@dataclasses.dataclass(frozen=True)
class DeviceGroup:
    """The devices of one (type, state, health), with their deployables and the
    accelerators those offer (``num_accelerators`` summed)."""

    type: str
    state: str
    health: str
    devices: int
    deployables: int
    accelerators: int


@dataclasses.dataclass(frozen=True)
class FleetCounts:
    devices: list[DeviceGroup]
    arqs: dict[str, int]                           # state -> count
    services: dict[tuple[str, bool], int]          # (binary, alive) -> count


_DEVICES = (
    select(_DEV.c.type, _DEV.c.state, _DEV.c.health,
           func.count(distinct(_DEV.c.id)), func.count(_DEP.c.id),
           func.coalesce(func.sum(_DEP.c.num_accelerators), 0))
    .select_from(_DEV.outerjoin(_DEP, _DEP.c.device_id == _DEV.c.id))
    .group_by(_DEV.c.type, _DEV.c.state, _DEV.c.health))
_ARQS = select(_ARQ.c.state, func.count()).group_by(_ARQ.c.state)


def fleet_counts(db: Database, down_time: int) -> FleetCounts:
    """Devices by type, state and health; ARQs by state; services by binary and
    liveness (alive: a heartbeat within ``down_time`` seconds, as ``GET /v1/services``
    says). Groups with no row are absent."""
    cutoff = m.utcnow() - datetime.timedelta(seconds=down_time)
    alive = _SVC.c.last_seen_at >= cutoff
    services = (select(_SVC.c.binary, func.sum(case((alive, 1), else_=0)), func.count())
                .group_by(_SVC.c.binary))
    with db.rows() as conn:
        devices = [DeviceGroup(type or "", state, health, int(n_dev), int(n_dep), int(n_acc))
                   for type, state, health, n_dev, n_dep, n_acc in conn.execute(_DEVICES)]
        arqs = {state: int(n) for state, n in conn.execute(_ARQS)}
        counted: dict[tuple[str, bool], int] = {}
        for binary, up, total in conn.execute(services):
            counted[binary, True] = int(up or 0)
            counted[binary, False] = int(total) - int(up or 0)
    return FleetCounts(devices, arqs, counted)

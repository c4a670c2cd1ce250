"""Services (heartbeats) and driver states."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from oslo_db import api as oslo_db_api
from sqlalchemy import insert, select, update

from acceld.db import models as m
from acceld.db.api import Database


@oslo_db_api.wrap_db_retry(max_retries=5, retry_interval=0.05, inc_retry_interval=True,
                           retry_on_deadlock=True)
def record_heartbeats(db: Database,
                      beats: Iterable[tuple[str, str, str, datetime.datetime]]) -> None:
    """Write coalesced heartbeats ``(host, binary, version, seen_at)`` in one transaction."""
    beats = list(beats)
    if not beats:
        return
    with db.writer() as s:
        existing = {(r.host, r.binary): r for r in s.execute(
            select(m.Service.host, m.Service.binary, m.Service.version, m.Service.last_seen_at)
            .where(m.Service.host.in_({b[0] for b in beats})))}
        new = []
        for host, binary, version, seen in beats:
            row = existing.get((host, binary))
            if row is None:
                new.append(dict(host=host, binary=binary, version=version, last_seen_at=seen,
                                created_at=m.utcnow()))
            elif row.last_seen_at < seen or row.version != version:
                s.execute(update(m.Service).where(m.Service.host == host,
                                                  m.Service.binary == binary,
                                                  m.Service.last_seen_at <= seen)
                          .values(last_seen_at=seen, version=version))
        if new:
            s.execute(insert(m.Service), new)


def list_services(db: Database, down_time: int) -> list[dict[str, Any]]:
    now = m.utcnow()
    with db.reader() as s:
        rows = s.execute(select(m.Service).order_by(m.Service.host, m.Service.binary)).scalars()
        return [{"host": r.host, "binary": r.binary, "version": r.version,
                 "last_seen_at": r.last_seen_at,
                 "alive": (now - r.last_seen_at).total_seconds() <= down_time}
                for r in rows]


def list_driver_states(db: Database, host: str | None = None) -> list[dict[str, Any]]:
    with db.reader() as s:
        q = select(m.DriverState).order_by(m.DriverState.host, m.DriverState.name)
        if host is not None:
            q = q.where(m.DriverState.host == host)
        return [{"host": r.host, "name": r.name, "version": r.version, "state": r.state,
                 "device_count": r.device_count, "error": r.error}
                for r in s.execute(q).scalars()]


def agent_hosts(db: Database) -> list[str]:
    with db.reader() as s:
        return list(s.execute(select(m.Service.host).where(m.Service.binary == "acceld-agent")
                              .order_by(m.Service.host)).scalars())

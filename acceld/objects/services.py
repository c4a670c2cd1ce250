"""Services (heartbeats) and driver states."""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from oslo_db import api as oslo_db_api
from sqlalchemy import bindparam, insert, select, update

from acceld import AGENT_BINARY, CONDUCTOR_BINARY
from acceld.db import models as m
from acceld.db.api import Database, duplicate_entry

_SERVICES = m.Service.__table__
# one newer beat of one service (a beat older than the row's changes nothing)
_BEAT = (update(_SERVICES)
         .where(_SERVICES.c.host == bindparam("b_host"),
                _SERVICES.c.binary == bindparam("b_binary"),
                _SERVICES.c.last_seen_at <= bindparam("b_seen"))
         .values(last_seen_at=bindparam("b_seen"), version=bindparam("b_version"),
                 conductor=bindparam("b_conductor")))


@oslo_db_api.wrap_db_retry(max_retries=5, retry_interval=0.05, inc_retry_interval=True,
                           retry_on_deadlock=True,
                           exception_checker=duplicate_entry)
def record_heartbeats(db: Database,
                      beats: Iterable[tuple[str, str, str, datetime.datetime]],
                      conductor: str | None = None) -> None:
    """Write coalesced heartbeats ``(host, binary, version, seen_at)`` in one transaction.

    ``conductor``, the conductor owning the beats' hosts (the recording conductor's ring
    says which), goes into each agent row it writes, in the same statements. A
    conductor's own row names none."""
    beats = list(beats)
    if not beats:
        return
    with db.writer() as s:
        existing = {(r.host, r.binary): r for r in s.execute(
            select(m.Service.host, m.Service.binary, m.Service.version, m.Service.last_seen_at,
                   m.Service.conductor)
            .where(m.Service.host.in_({b[0] for b in beats})))}
        new, changed = [], []
        for host, binary, version, seen in beats:
            owner = conductor if binary == AGENT_BINARY else None
            row = existing.get((host, binary))
            if row is None:
                new.append(dict(host=host, binary=binary, version=version, last_seen_at=seen,
                                conductor=owner, created_at=m.utcnow()))
            elif row.last_seen_at < seen or row.version != version or row.conductor != owner:
                changed.append({"b_host": host, "b_binary": binary, "b_seen": seen,
                                "b_version": version, "b_conductor": owner})
        if changed:       # one executemany: the driver batches the rows' UPDATEs
            s.execute(_BEAT, changed)
        if new:
            # NULL owners rendered: the ORM otherwise splits rows with and without an
            # owner (agents, conductors) into an INSERT each
            s.execute(insert(m.Service).execution_options(render_nulls=True), new)


def list_services(db: Database, down_time: int) -> list[dict[str, Any]]:
    """Every service with its liveness; an agent's row names the conductor that owns its
    host (``conductor``), a conductor's row counts the alive agents it owns (``hosts``),
    so an operator sees how the hosts are shared and whether each owner is alive."""
    now = m.utcnow()
    with db.reader() as s:
        rows = s.execute(select(m.Service).order_by(m.Service.host, m.Service.binary)).scalars()
        out = [{"host": r.host, "binary": r.binary, "version": r.version,
                "last_seen_at": r.last_seen_at,
                "alive": (now - r.last_seen_at).total_seconds() <= down_time,
                "conductor": r.conductor}
               for r in rows]
    owned = Counter(r["conductor"] for r in out if r["binary"] == AGENT_BINARY and r["alive"])
    for r in out:
        r["hosts"] = owned[r["host"]] if r["binary"] == CONDUCTOR_BINARY else None
    return out


def list_driver_states(db: Database, host: str | None = None,
                       long: bool = False) -> list[dict[str, Any]]:
    """Drivers per host; ``long`` adds their discovery explanation and capabilities."""
    with db.reader() as s:
        q = select(m.DriverState).order_by(m.DriverState.host, m.DriverState.name)
        if host is not None:
            q = q.where(m.DriverState.host == host)
        return [_driver_state(r, long) for r in s.execute(q).scalars()]


def _driver_state(r: m.DriverState, long: bool) -> dict[str, Any]:
    out = {"host": r.host, "name": r.name, "version": r.version, "state": r.state,
           "device_count": r.device_count, "error": r.error}
    if long:
        out["explanation"] = json.loads(r.explanation) if r.explanation else None
        out["capabilities"] = json.loads(r.capabilities) if r.capabilities else []
    return out


# Deployable attributes through which a driver names a device's backend and the services
# it offers there (the generic driver: the configured device spec's backend).
BACKEND_KEY = "backend"
SERVICES_KEY = "services"


def list_backends(db: Database, host: str | None = None) -> list[dict[str, Any]]:
    """Per host, driver and backend: its services, devices and deployables."""
    with db.reader() as s:
        attrs = (select(m.Device.hostname, m.Device.driver_name, m.Device.id,
                        m.Attribute.deployable_id, m.Attribute.key, m.Attribute.value)
                 .join(m.Deployable, m.Deployable.id == m.Attribute.deployable_id)
                 .join(m.Device, m.Device.id == m.Deployable.device_id)
                 .where(m.Attribute.key.in_((BACKEND_KEY, SERVICES_KEY)),
                        m.Device.hostname.is_not(None)))
        if host is not None:
            attrs = attrs.where(m.Device.hostname == host)
        rows = s.execute(attrs).all()
    by_dep: dict[int, dict[str, Any]] = {}
    for r in rows:
        by_dep.setdefault(r.deployable_id, {"host": r.hostname, "driver": r.driver_name,
                                            "device": r.id})[r.key] = r.value
    backends: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in by_dep.values():
        name = entry.get(BACKEND_KEY) or "default"
        out = backends.setdefault((entry["host"], entry["driver"], name), {
            "host": entry["host"], "driver": entry["driver"], "backend": name,
            "services": set(), "devices": set(), "deployables": 0})
        out["services"].update(_split_services(entry.get(SERVICES_KEY, "")))
        out["devices"].add(entry["device"])
        out["deployables"] += 1
    return [dict(b, services=sorted(b["services"]), devices=len(b["devices"]))
            for _key, b in sorted(backends.items())]


def _split_services(value: str) -> list[str]:
    """``"sym;asym"``, ``"sym,asym"`` or a JSON list -> ``["asym", "sym"]``."""
    value = value.strip()
    if value.startswith("["):
        try:
            return [str(v) for v in json.loads(value)]
        except ValueError:
            pass
    return [v.strip() for v in value.replace(";", ",").split(",") if v.strip()]


def agent_hosts(db: Database) -> list[str]:
    with db.reader() as s:
        return list(s.execute(select(m.Service.host).where(m.Service.binary == AGENT_BINARY)
                              .order_by(m.Service.host)).scalars())

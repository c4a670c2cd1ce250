"""Where the host-side work of an attach handle runs: its device's host, driver, identity.

Read by the conductor's ``AgentHostWork`` for each handle a bind claims or an unbind
frees; one query.
"""

from __future__ import annotations

import dataclasses
import json

from sqlalchemy import Connection, and_, bindparam, select
from sqlalchemy.orm import Session

from acceld import reports
from acceld.db import models as m
from acceld.db.api import Database


@dataclasses.dataclass(frozen=True)
class HandleTarget:
    host: str
    driver: str
    identity: str
    host_work: bool          # the driver declared that its handles need prepare/release


def handle_target(db: Database, handle_uuid: str) -> HandleTarget | None:
    """None when the handle, or its device's host, is gone (nothing to do on a host)."""
    with db.reader() as s:
        return handle_target_in(s, handle_uuid)


# Built once: it runs in every bind and unbind, and building the four-way join cost more
# than running it.
_TARGET = (select(m.Device.hostname, m.Device.driver_name, m.Device.identity,
                  m.DriverState.capabilities)
           .select_from(m.AttachHandle)
           .join(m.Deployable, m.Deployable.id == m.AttachHandle.deployable_id)
           .join(m.Device, m.Device.id == m.Deployable.device_id)
           .outerjoin(m.DriverState, and_(m.DriverState.host == m.Device.hostname,
                                          m.DriverState.name == m.Device.driver_name))
           .where(m.AttachHandle.uuid == bindparam("handle_uuid")))


def handle_target_in(s: Session | Connection, handle_uuid: str) -> HandleTarget | None:
    """:func:`handle_target` inside the caller's transaction (a bind asks while it holds
    the write lock; a second transaction there would wait for itself on SQLite)."""
    row = s.execute(_TARGET, {"handle_uuid": handle_uuid}).one_or_none()
    if row is None:
        return None
    return target_of(row.hostname, row.driver_name, row.identity, row.capabilities)


def target_of(hostname: str | None, driver: str | None, identity: str | None,
              capabilities: str | None) -> HandleTarget | None:
    """The target from a handle's device and driver-state columns, read by whichever
    query already joins them (a bind's claim reads them with the free handles)."""
    if hostname is None or driver is None:
        return None
    caps = json.loads(capabilities or "[]")
    return HandleTarget(host=hostname, driver=driver, identity=identity or "",
                        host_work=reports.CAP_HOST_WORK in caps)

"""Where the host-side work of an attach handle runs: its device's host, driver, identity
(read with the handles a bind or unbind touches, :data:`TARGET_COLUMNS`, or on its own).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sqlalchemy import Connection, and_, bindparam, select
from sqlalchemy.orm import Session

from acceld import reports
from acceld.db import models as m
from acceld.db.api import Database

ALWAYS = frozenset({"MDEV"})     # attach types whose handles always need host work


@dataclasses.dataclass(frozen=True)
class HandleTarget:
    host: str
    driver: str
    identity: str
    host_work: bool          # the driver declared that its handles need prepare/release
    program: bool = False    # the driver can load an image into its devices (FPGAs)


_dep = m.Deployable.__table__
_dev = m.Device.__table__
_ds = m.DriverState.__table__

# Where a handle's host work would run, and the driver's declared capabilities: any query
# joining a deployable :func:`with_target` can select these for :func:`target_of`.
TARGET_COLUMNS = (_dev.c.hostname.label("target_host"),
                  _dev.c.driver_name.label("target_driver"),
                  _dev.c.identity.label("target_identity"),
                  _ds.c.capabilities.label("target_caps"))


def with_target(deployables: Any) -> Any:
    """``deployables`` joined to each deployable's device and its driver state."""
    return (deployables.outerjoin(_dev, _dev.c.id == _dep.c.device_id)
            .outerjoin(_ds, and_(_ds.c.host == _dev.c.hostname,
                                 _ds.c.name == _dev.c.driver_name)))


_ah = m.AttachHandle.__table__
# Attach handles with their deployable, device and driver state: the FROM of a read of
# handles and their targets.
HANDLES_WITH_TARGET = with_target(_ah.join(_dep, _dep.c.id == _ah.c.deployable_id))
# Built once: it runs for every handle that comes without its target, and building the
# four-way join cost more than running it.
_TARGET = (select(*TARGET_COLUMNS).select_from(HANDLES_WITH_TARGET)
           .where(_ah.c.uuid == bindparam("handle_uuid")))


def handle_target(s: Session | Connection | Database,
                  handle_uuid: str) -> HandleTarget | None:
    """The handle's target, read in ``s`` (a bind's transaction) or on a Database."""
    if isinstance(s, Database):
        with s.reader() as session:
            return handle_target(session, handle_uuid)
    row = s.execute(_TARGET, {"handle_uuid": handle_uuid}).one_or_none()
    return None if row is None else target_of(row)


def target_of(row: Any) -> HandleTarget | None:
    """The target from a row with :data:`TARGET_COLUMNS`; None: device or host gone."""
    if row.target_host is None or row.target_driver is None:
        return None
    caps = json.loads(row.target_caps or "[]")
    return HandleTarget(host=row.target_host, driver=row.target_driver,
                        identity=row.target_identity or "",
                        host_work=reports.CAP_HOST_WORK in caps,
                        program=reports.CAP_PROGRAM in caps)


def target_for(handle: dict[str, Any],
               s: Session | Connection | Database) -> HandleTarget | None:
    """``handle``'s target: the one read with it (``"target"``), else read in ``s``."""
    if "target" in handle:
        known = handle["target"]
        return None if known is None else HandleTarget(**known)
    return handle_target(s, handle["uuid"])


def requires_host_work(handle: dict[str, Any], target: HandleTarget | None) -> bool:
    """MDEV handles always need host work, others when their driver declared it."""
    return handle.get("attach_type") in ALWAYS or (target is not None and target.host_work)


def needs_host_work(s: Session | Connection | Database, handle: dict[str, Any]) -> bool:
    """:func:`requires_host_work`, the target read only where it decides."""
    return handle.get("attach_type") in ALWAYS or \
        requires_host_work(handle, target_for(handle, s))

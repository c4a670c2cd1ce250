"""FPGA program operations: queued through the conductor, advanced by the agent's
progress, finished by its journaled outcome. One at a time per deployable: the unique
``active_key`` holds the deployable uuid until the finishing CAS clears it. Every change
is a CAS on ``states.PROGRAM_TRANSITIONS``, so late or duplicate casts change nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

from oslo_db import exception as db_exc
from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from acceld import exception, reports, states, uuids
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import holders

_OP = m.ProgramOperation


def to_dict(op: m.ProgramOperation) -> dict[str, Any]:
    """The API view of an operation."""
    return {"uuid": op.uuid, "deployable_uuid": op.deployable_uuid,
            "device_uuid": op.device_uuid, "host": op.host, "image_ref": op.image_ref,
            "image_sha256": op.image_sha256, "state": op.state, "progress": op.progress,
            "message": op.message, "arq_uuid": op.arq_uuid, "created_at": op.created_at,
            "updated_at": op.updated_at, "started_at": op.started_at,
            "finished_at": op.finished_at}


def agent_op(op: m.ProgramOperation) -> dict[str, Any]:
    """What the agent needs to run an operation (plain data for the bus)."""
    return {"op_id": op.uuid, "deployable_uuid": op.deployable_uuid,
            "device_uuid": op.device_uuid, "host": op.host, "driver": op.driver_name,
            "identity": op.identity, "image_ref": op.image_ref,
            "image_sha256": op.image_sha256}


def _target(s: Session, deployable_uuid: str, *,
            lock: bool = False) -> tuple[m.Deployable, m.Device]:
    """The deployable and its device (``lock``: rows locked, ``acceld.objects.holders``)."""
    q = (select(m.Deployable, m.Device).join(m.Device, m.Device.id == m.Deployable.device_id)
         .where(m.Deployable.uuid == deployable_uuid))
    row = s.execute(q.with_for_update() if lock else q).one_or_none()
    if row is None:
        raise exception.NotFound(f"Deployable {deployable_uuid} could not be found.")
    return row[0], row[1]


def _check_programmable(s: Session, dep: m.Deployable, dev: m.Device,
                        for_arq: str | None = None) -> None:
    if dev.hostname is None or dev.driver_name is None:
        raise exception.NotProgrammable(f"Deployable {dep.uuid} is on no host.")
    caps = s.execute(select(m.DriverState.capabilities).where(
        m.DriverState.host == dev.hostname, m.DriverState.name == dev.driver_name)).scalar()
    if reports.CAP_PROGRAM not in json.loads(caps or "[]"):
        raise exception.NotProgrammable(
            f"Deployable {dep.uuid} cannot be programmed: driver {dev.driver_name} on "
            f"{dev.hostname} does not program devices.")
    found = holders.holders(s, dev, except_arq=for_arq)
    if found:
        raise exception.DeployableInUse(
            f"Deployable {dep.uuid} is in use (held by {'; '.join(found)}); release it "
            "before programming.")


def begin(db: Database, deployable_uuid: str, image_ref: str, image_sha256: str,
          arq_uuid: str | None = None) -> dict[str, Any]:
    """Queue a program operation (``arq_uuid``: its bind); it, with ``agent_op``."""
    try:
        with db.writer() as s:
            dep, dev = _target(s, deployable_uuid, lock=True)
            _check_programmable(s, dep, dev, for_arq=arq_uuid)
            op = _OP(uuid=uuids.random_uuid(), deployable_uuid=dep.uuid,
                     device_uuid=dev.uuid, host=dev.hostname, driver_name=dev.driver_name,
                     identity=dev.identity or "", image_ref=image_ref,
                     image_sha256=image_sha256.lower(), state=states.PROGRAM_QUEUED,
                     progress=0, active_key=dep.uuid, arq_uuid=arq_uuid)
            s.add(op)
            s.flush()
            return dict(to_dict(op), agent_op=agent_op(op))
    except db_exc.DBDuplicateEntry as exc:
        with db.reader() as s:
            other = s.execute(select(_OP.uuid, _OP.state)
                              .where(_OP.active_key == deployable_uuid)).one_or_none()
        which = f" ({other.uuid} is {other.state})" if other else ""
        raise exception.ProgramInProgress(
            f"Deployable {deployable_uuid} has a program operation in progress{which}; "
            "wait for it to finish.") from exc


def latest(db: Database, deployable_uuid: str) -> dict[str, Any] | None:
    """The newest operation of a deployable (None: never programmed through acceld)."""
    with db.reader() as s:
        _target(s, deployable_uuid)
        op = s.execute(select(_OP).where(_OP.deployable_uuid == deployable_uuid)
                       .order_by(_OP.id.desc()).limit(1)).scalar_one_or_none()
        return None if op is None else to_dict(op)


def get(db: Database, op_uuid: str) -> dict[str, Any]:
    with db.reader() as s:
        op = s.execute(select(_OP).where(_OP.uuid == op_uuid)).scalar_one_or_none()
        if op is None:
            raise exception.ProgramNotFound(f"Program operation {op_uuid} not found.")
        return to_dict(op)


def progress(db: Database, op_uuid: str, percent: int, message: str) -> bool:
    """Queued/running -> running at ``percent``; never backwards, never after the end."""
    now = m.utcnow()
    with db.writer() as s:
        res = s.execute(update(_OP).where(
            _OP.uuid == op_uuid,
            _OP.state.in_(states.PROGRAM_TRANSITIONS[states.PROGRAM_RUNNING]),
            _OP.progress <= percent)
            .values(state=states.PROGRAM_RUNNING, progress=percent, message=message,
                    started_at=func.coalesce(_OP.started_at, now), updated_at=now))
        return res.rowcount == 1


@dataclasses.dataclass(frozen=True)
class Finished:
    """A recorded outcome: the ARQ whose bind it was part of (None: an operator's)."""

    arq_uuid: str | None


def finish(db: Database, op_uuid: str, ok: bool, error: str | None) -> Finished | None:
    """Record the outcome (None: a duplicate); a Glance image becomes ``bitstream_id``."""
    target = states.PROGRAM_DONE if ok else states.PROGRAM_FAILED
    now = m.utcnow()
    with db.writer() as s:
        values: dict[str, Any] = dict(state=target, active_key=None, finished_at=now,
                                      updated_at=now,
                                      message="programmed" if ok else (error or "failed"))
        if ok:
            values["progress"] = 100
        res = s.execute(update(_OP).where(
            _OP.uuid == op_uuid, _OP.state.in_(states.PROGRAM_TRANSITIONS[target]))
            .values(**values))
        if res.rowcount != 1:
            return None
        op = s.execute(select(_OP.deployable_uuid, _OP.image_ref, _OP.arq_uuid)
                       .where(_OP.uuid == op_uuid)).one()
        if ok and uuids.canonical(op.image_ref) == op.image_ref.lower():
            s.execute(update(m.Deployable).where(m.Deployable.uuid == op.deployable_uuid)
                      .values(bitstream_id=op.image_ref))
        return Finished(op.arq_uuid)


def stalled(db: Database, older_than: datetime.datetime) -> list[dict[str, Any]]:
    """Unfinished operations not heard of since ``older_than``: to be sent again."""
    with db.reader() as s:
        rows = s.execute(select(_OP).where(
            _OP.state.in_(states.PROGRAM_ACTIVE),
            or_(_OP.updated_at < older_than,
                _OP.updated_at.is_(None) & (_OP.created_at < older_than)))).scalars()
        return [agent_op(op) for op in rows]


def touch(db: Database, op_uuid: str) -> None:
    with db.writer() as s:
        s.execute(update(_OP).where(_OP.uuid == op_uuid).values(updated_at=m.utcnow()))

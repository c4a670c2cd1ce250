"""Accelerators (the v1 view of a device): reads, declared records, compare-and-swap writes.

Every write is one ``UPDATE ... WHERE`` on the expected revision, state or attachment;
no row changed becomes the precise conflict (or 404). A read takes the ``viewer`` (the
caller's project; None: an admin): a project sees only its own ARQs among a device's
``allocations`` and only the instance its own request attached; the rest is inventory.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid as uuidlib
from collections.abc import Collection
from typing import Any, NamedTuple

from oslo_db import exception as db_exc
from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from acceld import exception, states
from acceld.db import models as m
from acceld.db import paging
from acceld.db.api import Database
from acceld.objects import arqs, health, holders, inventory, ledger


@dataclasses.dataclass(frozen=True)
class Operation:
    """A driver operation the conductor must have an agent run."""

    op_id: str
    device_uuid: str
    host: str
    driver: str
    identity: str
    operation: str           # install | uninstall


def to_dict(dev: m.Device, allocations: list[dict[str, str]] | None = None,
            viewer: str | None = None, held: bool = False) -> dict[str, Any]:
    """The v1 view for ``viewer``; ``allocations``: the v2 ARQs holding the device (the
    viewer's); ``held``: whether anything holds it (a drain is ``draining`` till none)."""
    attached = None
    if dev.attached_to is not None:
        hidden = (viewer is not None and dev.attach_type == "instance"
                  and dev.attached_project_id != viewer)
        attached = {"type": dev.attach_type, "id": None if hidden else dev.attached_to}
        if dev.attach_type == "instance":    # Attaching, Attached or Detaching (hot plug)
            attached["hot_plug"] = dev.hot_plug
    return {
        "uuid": dev.uuid, "name": dev.name, "host": dev.hostname, "driver": dev.driver_name,
        "device_type": dev.type, "vendor_id": dev.vendor, "product_id": dev.model,
        "state": dev.state, "health": dev.health,
        "health_reasons": json.loads(dev.health_reasons or "[]"),
        "acc_specs": json.loads(dev.acc_specs),
        "attached_to": attached, "allocations": allocations or [],
        "revision": dev.revision, "last_error": dev.last_error,
        "lifecycle": dev.lifecycle, "lifecycle_reason": dev.lifecycle_reason,
        "maintenance": health.maintenance_view(bool(dev.maintenance), held),
        "maintenance_reason": dev.maintenance_reason,
        "created_at": dev.created_at, "updated_at": dev.updated_at,
    }


def _with_allocations(s: Session, devs: list[m.Device],
                      viewer: str | None = None) -> list[dict[str, Any]]:
    found: dict[int, list[dict[str, str]]] = {}
    if devs:
        for dev_id, arq, instance, _state in s.execute(
                holders.holding_arqs(viewer).where(m.Deployable.device_id.in_(
                    [d.id for d in devs])).order_by(m.ExtendedAcceleratorRequest.id)):
            found.setdefault(dev_id, []).append({"accelerator_request": arq,
                                                 "instance_uuid": instance})
    held = {d.id for d in devs if d.attached_to is not None or d.id in found}
    drained = [d.id for d in devs if d.maintenance and d.id not in held]
    if drained and viewer is not None:   # another project's ARQs hold it too
        held.update(s.execute(holders.holding_arqs().with_only_columns(
            m.Deployable.device_id).where(m.Deployable.device_id.in_(drained))).scalars())
    return [to_dict(d, found.get(d.id), viewer, d.id in held) for d in devs]


def list_accelerators(db: Database, *, host: str | None = None, state: str | None = None,
                      device_type: str | None = None, instance_uuid: str | None = None,
                      limit: int | None = None, marker: str | None = None,
                      viewer: str | None = None) -> paging.Listing:
    """Accelerators with exact-match filters (``acceld.db.paging``)."""
    q = select(m.Device).order_by(m.Device.id)
    for column, value in ((m.Device.hostname, host), (m.Device.state, state),
                          (m.Device.type, device_type)):
        if value is not None:
            q = q.where(column == value)
    if instance_uuid is not None:  # attached through v1, or held through a v2 ARQ
        held = holders.holding_arqs(viewer).where(
            m.ExtendedAcceleratorRequest.instance_uuid == instance_uuid).subquery()
        attached = and_(m.Device.attach_type == "instance",
                        m.Device.attached_to == instance_uuid)
        if viewer is not None:
            attached = and_(attached, m.Device.attached_project_id == viewer)
        q = q.where(or_(attached, m.Device.id.in_(select(held.c.device_id))))
    return paging.listing(
        db.reader, paging.keyset(q, m.Device.id),
        lambda s, rows: _with_allocations(s, [r[0] for r in rows], viewer),
        table=m.Device.__table__, what="an accelerator", limit=limit, marker=marker)


def _get(s: Session, uuid: str, *, lock: bool = False) -> m.Device:
    """The device row (``lock``: locked for the transaction, ``acceld.objects.holders``)."""
    q = select(m.Device).where(m.Device.uuid == uuid)
    dev = s.execute(q.with_for_update() if lock else q).scalar_one_or_none()
    if dev is None:
        raise exception.AcceleratorNotFound(f"Accelerator {uuid} not found.")
    return dev


def get_accelerator(db: Database, uuid: str, viewer: str | None = None) -> dict[str, Any]:
    with db.reader() as s:
        return _with_allocations(s, [_get(s, uuid)], viewer)[0]


def create_accelerator(db: Database, name: str, uuid: str | None = None) -> dict[str, Any]:
    """Declare an accelerator by name; a device later discovered with that name adopts it."""
    row = m.Device(uuid=uuid or str(uuidlib.uuid4()), name=name, state=states.INACTIVE,
                   health=states.HEALTH_OK, acc_specs="{}", revision=1)
    try:
        with db.writer() as s:
            s.add(row)
            s.flush()
            return to_dict(row)
    except db_exc.DBDuplicateEntry as exc:
        column = "uuid" if any("uuid" in c for c in exc.columns or []) else "name"
        value = uuid if column == "uuid" else name
        raise exception.DuplicateName(
            f"An accelerator with {column} {value!r} already exists.") from exc


def _changed(**values: Any) -> dict[str, Any]:
    """``values`` of a device update, with its revision and ``updated_at`` moved on."""
    return dict(values, revision=m.Device.revision + 1, updated_at=m.utcnow())


def update_acc_specs(db: Database, uuid: str, specs: dict[str, Any],
                     revision: int) -> dict[str, Any]:
    with db.writer() as s:
        res = s.execute(update(m.Device)
                        .where(m.Device.uuid == uuid, m.Device.revision == revision)
                        .values(_changed(acc_specs=json.dumps(specs, sort_keys=True))))
        dev = _get(s, uuid)
        if res.rowcount == 0:
            raise exception.RevisionConflict(
                f"Accelerator {uuid} is at revision {dev.revision}, not {revision}: another "
                "writer changed it first. Read it again and retry.")
        return to_dict(dev)


def begin_transition(db: Database, uuid: str, requested: str
                     ) -> tuple[dict[str, Any], Operation | None]:
    """Move towards ``requested`` (ready/inactive); returns the operation to run, if any."""
    with db.writer() as s:
        dev = _get(s, uuid, lock=requested == states.INACTIVE)
        try:
            transient = states.request_target(dev.state, requested)
        except ValueError as exc:
            raise exception.InvalidStateTransition(
                f"Accelerator {uuid} is {dev.state}: {exc}.") from exc
        if transient is None:
            return to_dict(dev), None
        if dev.hostname is None:
            raise exception.NotReady(f"Accelerator {uuid} is not on any host yet.")
        if requested == states.INACTIVE:   # the uninstall would run under its holder
            holders.refuse_if_held(s, dev, f"set accelerator {uuid} inactive")
        op_id = str(uuidlib.uuid4())
        res = s.execute(update(m.Device).where(
            m.Device.uuid == uuid,
            m.Device.state.in_(states.DEVICE_TRANSITIONS[transient]))
            .values(_changed(state=transient, op_id=op_id, op_started_at=m.utcnow(),
                             last_error=None)))
        if res.rowcount == 0:
            raise exception.InvalidStateTransition(
                f"Accelerator {uuid} changed state concurrently; retry.")
        s.refresh(dev)
        op = Operation(op_id, uuid, dev.hostname, dev.driver_name or "", dev.identity or "",
                       states.TRANSIENT_OPERATION[transient])
        return to_dict(dev), op


def finish_transition(db: Database, uuid: str, op_id: str, ok: bool,
                      error: str | None = None) -> bool:
    """Record an operation's outcome; False when it was already recorded (a duplicate)."""
    with db.writer() as s:
        dev = s.execute(select(m.Device).where(m.Device.uuid == uuid, m.Device.op_id == op_id)
                        ).scalar_one_or_none()
        if dev is None or dev.state not in states.TRANSIENT_OUTCOME:
            return False
        success, failure = states.TRANSIENT_OUTCOME[dev.state]
        res = s.execute(update(m.Device).where(m.Device.uuid == uuid, m.Device.op_id == op_id)
                        .values(_changed(state=success if ok else failure, op_id=None,
                                         op_started_at=None, last_error=None if ok else error)))
        return res.rowcount == 1


def stalled_operations(db: Database, older_than: datetime.datetime) -> list[Operation]:
    """Transitions started before ``older_than`` and not finished: to be sent again."""
    with db.reader() as s:
        rows = s.execute(select(m.Device).where(
            m.Device.state.in_(tuple(states.TRANSIENT_OPERATION)),
            m.Device.op_started_at < older_than)).scalars()
        return [Operation(d.op_id, d.uuid, d.hostname, d.driver_name or "", d.identity or "",
                          states.TRANSIENT_OPERATION[d.state]) for d in rows]


def touch_operation(db: Database, op_id: str) -> None:
    with db.writer() as s:
        s.execute(update(m.Device).where(m.Device.op_id == op_id)
                  .values(op_started_at=m.utcnow()))


def _device_handles(dev_id: int):  # noqa: ANN202 - a SQLAlchemy clause
    return m.AttachHandle.deployable_id.in_(
        select(m.Deployable.id).where(m.Deployable.device_id == dev_id).scalar_subquery())


def _refuse_attach(dev: m.Device) -> None:
    """AlreadyAttached or NotReady when ``dev`` cannot be attached now."""
    if dev.attached_to is not None:
        raise exception.AlreadyAttached(
            f"Accelerator {dev.uuid} is already attached to {dev.attach_type} "
            f"{dev.attached_to}.")
    if dev.state != states.READY or dev.health not in states.USABLE_HEALTH:
        raise exception.NotReady(
            f"Accelerator {dev.uuid} is {dev.state} (health {dev.health}); only a ready, "
            "healthy accelerator can be attached.")
    if dev.lifecycle not in states.SCHEDULABLE_LIFECYCLE or dev.maintenance:
        raise exception.NotReady(
            f"Accelerator {dev.uuid} is {dev.lifecycle}"
            f"{' and in maintenance' if dev.maintenance else ''}; it cannot be attached.")


def _handles_per_type(s: Session, dev: m.Device) -> dict[str, int]:
    return dict(s.execute(select(m.AttachHandle.attach_type, func.count())
                          .where(_device_handles(dev.id))
                          .group_by(m.AttachHandle.attach_type)).all())


def _refuse_unattachable(dev: m.Device, per_type: dict[str, int]) -> None:
    unattachable = set(per_type) - states.GUEST_ATTACH_TYPES
    if unattachable:
        raise exception.DeviceNotUsable(
            f"Accelerator {dev.uuid} offers attach handles of type "
            f"{', '.join(sorted(unattachable))}, which no hypervisor attaches to an "
            "instance; attach it to a host.")


def check_attachable(db: Database, uuid: str, attach_type: str) -> str | None:
    """What :func:`attach` would refuse now (not ready, attached, handles no guest
    takes), checked before a target is looked for; the device's host."""
    with db.reader() as s:
        dev = _get(s, uuid)
        _refuse_attach(dev)
        if attach_type == "instance":
            _refuse_unattachable(dev, _handles_per_type(s, dev))
        return dev.hostname


def attach(db: Database, uuid: str, attach_type: str, target: str,
           project_id: str | None = None) -> dict[str, Any]:
    """Attach, claiming every handle of the device (all or nothing); ``project_id``'s view."""
    with db.writer() as s:
        return _with_allocations(s, [_attach(s, uuid, attach_type, target, project_id)],
                                 project_id)[0]


def attach_to_instance(db: Database, uuid: str, instance: str,
                       project_id: str | None) -> list[dict[str, Any]]:
    """:func:`attach` to ``instance``, the attachment Attaching (a hot plug); the handles
    to put in the guest (:func:`_guest_handles`)."""
    with db.writer() as s:
        dev = _attach(s, uuid, "instance", instance, project_id)
        return _guest_handles(s, [dev.id]).get(dev.id, [])


def _attach(s: Session, uuid: str, attach_type: str, target: str,
            project_id: str | None) -> m.Device:
    res = s.execute(update(m.Device).where(
        m.Device.uuid == uuid, m.Device.attached_to.is_(None),
        m.Device.state == states.READY, m.Device.health.in_(states.USABLE_HEALTH),
        m.Device.lifecycle.in_(states.SCHEDULABLE_LIFECYCLE),
        m.Device.maintenance.is_(False))
        .values(_changed(attach_type=attach_type, attached_to=target, attached_project_id=(
            project_id if attach_type == "instance" else None),
            hot_plug=states.HOT_ATTACHING if attach_type == "instance" else None)))
    dev = _get(s, uuid)
    if res.rowcount == 0:
        _refuse_attach(dev)
        raise exception.AlreadyAttached(f"Accelerator {uuid} changed concurrently; "
                                        "retry.")
    per_type = _handles_per_type(s, dev)
    if attach_type == "instance":
        _refuse_unattachable(dev, per_type)
    total = sum(per_type.values())
    claimed = s.execute(update(m.AttachHandle)
                        .where(_device_handles(dev.id), m.AttachHandle.in_use.is_(False))
                        .values(in_use=True)
                        .execution_options(synchronize_session=False)).rowcount
    if claimed != total:  # raising rolls the whole transaction back
        raise exception.AlreadyAttached(
            f"Accelerator {uuid} is held by accelerator requests ({total - claimed} of "
            f"its {total} attach handles are in use).")
    ledger.record(s.connection(), _attachment_entry(dev, ledger.ATTACH))
    return dev


def _attachment_entry(dev: m.Device, event: str) -> ledger.Entry:
    """The ledger line of ``dev``'s v1 attachment (as it is, attached) starting or ending."""
    instance = dev.attach_type == "instance"
    return ledger.Entry(
        event=event, kind=ledger.KIND_ACCELERATOR, device_uuid=dev.uuid,
        instance_uuid=dev.attached_to if instance else None,
        host=dev.hostname if instance else dev.attached_to,
        project_id=dev.attached_project_id,
        from_state="detached" if event == ledger.ATTACH else f"attached:{dev.attach_type}",
        to_state=f"attached:{dev.attach_type}" if event == ledger.ATTACH else "detached")


def instance_attachments(db: Database, host: str | None = None) -> list[dict[str, Any]]:
    """The v1 attachments to instances (of ``host``, or all): {uuid, host, instance,
    hot_plug, updated_at, handles (:func:`_guest_handles`)}, in two statements."""
    q = select(m.Device.id, m.Device.uuid, m.Device.hostname, m.Device.attached_to,
               m.Device.hot_plug, m.Device.updated_at).where(
        m.Device.attach_type == "instance", m.Device.hostname.is_not(None))
    if host is not None:
        q = q.where(m.Device.hostname == host)
    with db.reader() as s:
        rows = s.execute(q.order_by(m.Device.id)).all()
        handles = _guest_handles(s, [r.id for r in rows])
    return [{"uuid": r.uuid, "host": r.hostname, "instance": r.attached_to,
             "hot_plug": r.hot_plug, "updated_at": r.updated_at,
             "handles": handles.get(r.id, [])} for r in rows]


def _guest_handles(s: Session, dev_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """device id -> its attach handles a hypervisor attaches to a guest: {uuid, type,
    info (:func:`acceld.objects.arqs.attach_info_strings`)}."""
    found: dict[int, list[dict[str, Any]]] = {}
    if not dev_ids:
        return found
    rows = s.execute(select(m.Deployable.device_id, m.AttachHandle.uuid,
                            m.AttachHandle.attach_type, m.AttachHandle.attach_info)
                     .join(m.Deployable, m.Deployable.id == m.AttachHandle.deployable_id)
                     .where(m.Deployable.device_id.in_(dev_ids),
                            m.AttachHandle.attach_type.in_(states.GUEST_ATTACH_TYPES))
                     .order_by(m.AttachHandle.id))
    for row in rows:
        found.setdefault(row.device_id, []).append(
            {"uuid": row.uuid, "type": row.attach_type,
             "info": arqs.attach_info_strings(row.attach_info)})
    return found


def set_hot_plug(db: Database, uuid: str, instance: str, to: str, *,
                 expect: Collection[str]) -> bool:
    """The hot-plug substate of ``uuid``'s attachment to ``instance``, ``expect`` -> ``to``
    in one compare-and-swap; False when it was not (detached, or another substate)."""
    with db.writer() as s:
        return s.execute(update(m.Device).where(
            m.Device.uuid == uuid, m.Device.attach_type == "instance",
            m.Device.attached_to == instance, m.Device.hot_plug.in_(sorted(expect)))
            .values(hot_plug=to).execution_options(synchronize_session=False)).rowcount == 1


def attachment(db: Database, uuid: str) -> tuple[str | None, str | None, str | None]:
    """(attach type, target, host) of an accelerator."""
    with db.reader() as s:
        dev = _get(s, uuid)
        return dev.attach_type, dev.attached_to, dev.hostname


def _check_no_allocations(s: Session, dev: m.Device) -> None:
    allocations = s.execute(select(func.count()).select_from(
        holders.holding_arqs().where(m.Deployable.device_id == dev.id).subquery())).scalar()
    if allocations:
        raise exception.AllocationsExist(
            f"Accelerator {dev.uuid} has {allocations} allocation record(s) (bound "
            "accelerator requests); release them before detaching.")


def identity_of(db: Database, uuid: str) -> str:
    with db.reader() as s:
        return _get(s, uuid).identity or ""


def check_owner(dev_project: str | None, attach_type: str | None, uuid: str,
                project_id: str | None) -> None:
    """OtherProject when ``project_id`` (not an admin) did not make the attachment."""
    if project_id is not None and attach_type == "instance" and dev_project != project_id:
        raise exception.OtherProject(
            f"Accelerator {uuid} was attached to an instance by another project's request.")


class Detach(NamedTuple):
    """An accelerator's attachment as a detach found it (:func:`ask_detach`)."""

    attach_type: str | None
    target: str | None
    host: str | None
    handles: list[dict[str, Any]]       # an instance attachment's (_guest_handles)


def _detachable(s: Session, uuid: str, project_id: str | None) -> m.Device:
    """The device row, when :func:`detach` may detach it for ``project_id`` (not
    another project's attachment, no bound ARQs)."""
    dev = _get(s, uuid)
    check_owner(dev.attached_project_id, dev.attach_type, uuid, project_id)
    _check_no_allocations(s, dev)
    return dev


def ask_detach(db: Database, uuid: str, project_id: str | None = None) -> Detach:
    """What :func:`detach` refuses, checked before anything outside the database is
    undone; an instance attachment is marked Detaching (kept while the guest has not
    released its handles, so that the reconcile never attaches them again), refused while
    it is being attached."""
    with db.writer() as s:
        dev = _detachable(s, uuid, project_id)
        if dev.attach_type != "instance":
            return Detach(dev.attach_type, dev.attached_to, dev.hostname, [])
        res = s.execute(update(m.Device).where(
            m.Device.id == dev.id, m.Device.attached_to == dev.attached_to,
            m.Device.hot_plug.in_([states.HOT_ATTACHED, states.HOT_DETACHING]))
            .values(hot_plug=states.HOT_DETACHING)
            .execution_options(synchronize_session=False))
        if res.rowcount != 1:
            raise exception.Conflict(
                f"Accelerator {uuid} is being attached to instance {dev.attached_to}; "
                "detach it once the attach has ended.")
        return Detach(dev.attach_type, dev.attached_to, dev.hostname,
                      _guest_handles(s, [dev.id]).get(dev.id, []))


def detach(db: Database, uuid: str, project_id: str | None = None,
           hot_plug: str | None = None) -> bool:
    """Detach; refused while bound ARQs hold the device, or for another project.
    ``hot_plug``: only an instance attachment in that substate (a compare-and-swap).
    False when nothing was detached."""
    with db.writer() as s:
        dev = _detachable(s, uuid, project_id)
        if dev.attached_to is None or (hot_plug is not None and dev.hot_plug != hot_plug):
            return False
        entry = _attachment_entry(dev, ledger.DETACH)
        res = s.execute(update(m.Device).where(
            m.Device.id == dev.id, m.Device.attached_to == dev.attached_to,
            m.Device.hot_plug == dev.hot_plug)          # IS NULL for None
            .values(_changed(attach_type=None, attached_to=None, attached_project_id=None,
                             hot_plug=None))
            .execution_options(synchronize_session=False))
        if res.rowcount != 1:
            return False                # detached or changed since it was read
        ledger.record(s.connection(), entry)
        # No ARQ holds a handle (checked above), so every claimed handle is the v1 claim.
        s.execute(update(m.AttachHandle).where(_device_handles(dev.id))
                  .values(in_use=False).execution_options(synchronize_session=False))
        if dev.health == states.HEALTH_MISSING and dev.hostname:
            inventory.forget_digest(s, dev.hostname)
        return True

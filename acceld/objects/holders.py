"""Who holds a device: the accelerator requests bound to its attach handles and its v1
attachment. Nothing may take a held device out of service (inactive, disabled, its driver
removed) or load another image into it.

The check and the change it guards run in one transaction that first locks the device's
row (:func:`lock_device`, ``SELECT ... FOR UPDATE``). A bind reads the same row with a
shared lock before it claims a handle (``acceld.objects.arqs``; on MySQL its one UPDATE
reads the row as a locking read), and a bind refuses a device that is not usable. So
either the bind committed first and the holder is seen here, or this transaction moved
the device first and the bind sees it unusable: never both.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from acceld import exception, states
from acceld.db import models as m
from acceld.db.api import Database

_ARQ = m.ExtendedAcceleratorRequest
# An ARQ in these states holds (or is being given) its deployable's device.
HOLDING_STATES = (states.ARQ_BIND_STARTED, states.ARQ_BOUND)


def lock_device(s: Session, uuid: str, *where: Any) -> m.Device:
    """The device row, locked for this transaction (the first statement of it, so that
    on MySQL the reads after it see every bind committed before the lock was granted);
    NotFound when there is none (with ``where``: none matching)."""
    dev = s.execute(select(m.Device).where(m.Device.uuid == uuid, *where)
                    .with_for_update()).scalar_one_or_none()
    if dev is None:
        raise exception.NotFound(f"Device {uuid} could not be found.")
    return dev


def holding_arqs(viewer: str | None = None):  # noqa: ANN201 - a SQLAlchemy select
    """(device id, ARQ uuid, instance uuid, state) of the accelerator requests holding a
    handle of a device (only ``viewer``'s, when one is given)."""
    q = (select(m.Deployable.device_id, _ARQ.uuid, _ARQ.instance_uuid, _ARQ.state)
         .join(m.Deployable, m.Deployable.id == _ARQ.deployable_id)
         .where(_ARQ.state.in_(HOLDING_STATES)))
    return q if viewer is None else q.where(_ARQ.project_id == viewer)


def holders(s: Session, dev: m.Device, *, except_arq: str | None = None) -> list[str]:
    """Who holds ``dev``, each as a phrase naming it (empty: nobody). ``except_arq``: an
    accelerator request not to count (the bind that is programming the device)."""
    return _holders_of(s, [dev], except_arq).get(dev.id, [])


def _holders_of(s: Session, devs: list[m.Device],
                except_arq: str | None = None) -> dict[int, list[str]]:
    """:func:`holders` of each of ``devs`` (by device id; the held ones only), in one
    query."""
    q = (holding_arqs().where(m.Deployable.device_id.in_([dev.id for dev in devs]))
         .order_by(_ARQ.id))
    if except_arq is not None:
        q = q.where(_ARQ.uuid != except_arq)
    found: dict[int, list[str]] = {}
    for dev_id, arq, instance, state in s.execute(q):
        found.setdefault(dev_id, []).append(
            f"accelerator request {arq} ({state}, instance {instance})")
    for dev in devs:
        if dev.attached_to is not None:
            found.setdefault(dev.id, []).append(f"{dev.attach_type} {dev.attached_to} "
                                                "(attached)")
    return found


def refuse_if_held(s: Session, dev: m.Device, action: str, *,
                   except_arq: str | None = None) -> None:
    """DeviceInUse naming the holders when anyone holds ``dev``; ``action`` says what was
    refused ("set it inactive", ...)."""
    found = holders(s, dev, except_arq=except_arq)
    if found:
        raise exception.DeviceInUse(
            f"Cannot {action}: device {dev.uuid} is held by {'; '.join(found)}. Release it "
            "first (unbind or delete the request, detach the accelerator).")


def refuse_driver_removal(db: Database, driver: str, hosts: list[str]) -> None:
    """DeviceInUse naming every held device of ``driver`` on ``hosts``: removing the driver
    from an agent would drop devices that instances or hosts hold. (Advisory: the removal
    itself is the agent's, not a row this transaction could lock.)"""
    with db.reader() as s:
        devs = list(s.execute(select(m.Device).where(m.Device.driver_name == driver,
                                                     m.Device.hostname.in_(hosts))
                              .order_by(m.Device.id)).scalars())
        held = _holders_of(s, devs)
        found = [f"device {dev.uuid} on {dev.hostname} ({'; '.join(held[dev.id])})"
                 for dev in devs if dev.id in held]
    if found:
        raise exception.DeviceInUse(
            f"Cannot remove driver {driver}: it drives held devices: {', '.join(found)}. "
            "Release them first.")

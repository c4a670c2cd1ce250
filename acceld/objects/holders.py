"""Who holds a device (ARQs bound to its handles, its v1 attachment): a held device may
not be taken out of service or reprogrammed. The check and the change run in one
transaction that first locks the device row; a bind reads that row under a shared lock
before its claim and refuses an unusable device, so exactly one of the two sees the other.
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
    """The device row, locked first in the transaction; NotFound when none matches."""
    dev = s.execute(select(m.Device).where(m.Device.uuid == uuid, *where)
                    .with_for_update()).scalar_one_or_none()
    if dev is None:
        raise exception.NotFound(f"Device {uuid} could not be found.")
    return dev


def holding_arqs(viewer: str | None = None):  # noqa: ANN201 - a SQLAlchemy select
    """(device id, ARQ uuid, instance uuid, state) of ARQs holding a device (``viewer``'s)."""
    q = (select(m.Deployable.device_id, _ARQ.uuid, _ARQ.instance_uuid, _ARQ.state)
         .join(m.Deployable, m.Deployable.id == _ARQ.deployable_id)
         .where(_ARQ.state.in_(HOLDING_STATES)))
    return q if viewer is None else q.where(_ARQ.project_id == viewer)


def holders(s: Session, dev: m.Device, *, except_arq: str | None = None) -> list[str]:
    """Who holds ``dev``, a phrase each; ``except_arq``: an ARQ not to count."""
    return _holders_of(s, [dev], except_arq).get(dev.id, [])


def _holders_of(s: Session, devs: list[m.Device],
                except_arq: str | None = None) -> dict[int, list[str]]:
    """:func:`holders` of each held one of ``devs`` by device id, in one query."""
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
    """DeviceInUse naming the holders (and the refused ``action``) when ``dev`` is held."""
    found = holders(s, dev, except_arq=except_arq)
    if found:
        raise exception.DeviceInUse(
            f"Cannot {action}: device {dev.uuid} is held by {'; '.join(found)}. Release it "
            "first (unbind or delete the request, detach the accelerator).")


def refuse_driver_removal(db: Database, driver: str, hosts: list[str]) -> None:
    """DeviceInUse naming the held devices of ``driver`` on ``hosts`` (advisory)."""
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

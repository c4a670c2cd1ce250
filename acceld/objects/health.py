"""A device's health life cycle and maintenance (drain): every change, one transaction.

Every change of either goes through :func:`_apply` (the operator's through
:func:`transition`, a report's verdicts through ``objects.inventory``), which locks the
device row first (``objects.holders``: a bind reads that row under a shared lock before
its claim, so a bind either lands before the change, and is listed among the holders,
or sees the device unusable and is refused), checks the move against
``acceld.states``, writes it and answers a :class:`Transition`. Whoever must hear of a
change (Placement, notifications) takes it from there.
"""

from __future__ import annotations

import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from acceld import exception, states
from acceld.db import models as m
from acceld.db.api import Database
from acceld.notify import payloads
from acceld.objects import holders, ledger

# How a Transition names the two sides of a maintenance change.
IN_SERVICE, IN_MAINTENANCE = "in_service", "maintenance"
LIFECYCLE, MAINTENANCE = "lifecycle", "maintenance"
# Who asked for a change.
BY_OPERATOR, BY_CONDUCTOR = "operator", "conductor"


class Transition(payloads.DeviceHealthPayload):
    """One change of a device's life cycle (``what`` = lifecycle) or maintenance flag
    (``what`` = maintenance, sides ``in_service``/``maintenance``), as the notification
    ``acceld.device.health_change`` carries it. ``changed`` False: the device was there
    already and nothing was written. ``holders``: the ARQs (and a v1 attachment) holding
    the device at the change: the guests a quarantine or drain leaves alone."""

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def to_dict(self) -> dict[str, Any]:
        """The ``transition`` of the operator answers."""
        return {"device_uuid": self.uuid, "host": self.host, "what": self.what,
                "before": self.before, "after": self.after, "reason": self.reason,
                "actor": self.actor, "changed": self.changed, "at": _iso(self.at),
                "holders": [dict(h) for h in self.holders]}


def transition(db: Database, uuid: str, change: str, *, reason: str = "",
               actor: str = BY_OPERATOR,
               allowed: frozenset[str] | None = None,
               refuse_held: str | None = None) -> Transition:
    """Move device ``uuid``: ``change`` is a life-cycle state (entered from ``allowed``,
    default: the transition table's) or a maintenance change (drain, undrain).
    ``refuse_held``: the action to name when a holder must refuse it (a reset).
    HealthStateConflict names both states when the move is not allowed; NotFound."""
    with db.writer() as s:
        dev = holders.lock_device(s, uuid)
        if refuse_held is not None:
            holders.refuse_if_held(s, dev, refuse_held)
        return _apply(s, dev, change, reason=reason, actor=actor, allowed=allowed)


def _apply(s: Session, dev: m.Device, change: str, *, reason: str, actor: str,
           allowed: frozenset[str] | None = None) -> Transition:
    """THE one place a life-cycle or maintenance change is written (in the caller's
    transaction, the device row locked): compare-and-swap on the current state, and its
    ledger line (kind ``health``) in the same transaction."""
    now = m.utcnow()
    if change in states.MAINTENANCE_TRANSITIONS:
        what = MAINTENANCE
        flag, source = states.MAINTENANCE_TRANSITIONS[change]
        before = IN_MAINTENANCE if dev.maintenance else IN_SERVICE
        after = IN_MAINTENANCE if flag else IN_SERVICE
        column, current, values = m.Device.maintenance, bool(dev.maintenance), dict(
            maintenance=flag, maintenance_reason=reason or None, maintenance_at=now)
        sources: frozenset[Any] = frozenset({source, flag})
    elif change in states.LIFECYCLE_STATES:
        what, before, after = LIFECYCLE, dev.lifecycle, change
        column, current, values = m.Device.lifecycle, dev.lifecycle, dict(
            lifecycle=change, lifecycle_reason=reason or None, lifecycle_at=now)
        sources = (allowed if allowed is not None
                   else states.LIFECYCLE_TRANSITIONS[change]) | {change}
    else:
        raise exception.InvalidInput(f"unknown health change {change!r}")
    done = Transition(uuid=dev.uuid, host=dev.hostname, what=what, before=before,
                      after=after, reason=reason, actor=actor, at=now,
                      holders=tuple(bound(s, dev)))
    if not done.changed:
        return done
    if current not in sources or s.execute(
            update(m.Device).where(m.Device.id == dev.id, column == current)
            .values(**values).execution_options(synchronize_session=False)).rowcount != 1:
        raise exception.HealthStateConflict(
            f"Device {dev.uuid} is {before}: it cannot go to {after}"
            + ("" if what == MAINTENANCE else
               f" (only from {', '.join(sorted(sources - {change}))})") + ".")
    ledger.record(s.connection(), ledger.Entry(
        event=what, kind="health", device_uuid=dev.uuid, host=dev.hostname,
        from_state=before, to_state=after, detail=f"{actor}: {reason}" if reason else actor,
        at=now))
    return done


def apply_verdicts(s: Session, verdicts: list[tuple[int, str, str]]) -> list[Transition]:
    """A report's life-cycle verdicts (device id, state, why), in its transaction: each
    one whose device may still make that move (a concurrent operator's change wins)."""
    done = []
    for dev_id, target, why in verdicts:
        dev = s.execute(select(m.Device).where(m.Device.id == dev_id)
                        .with_for_update()).scalar_one_or_none()
        if dev is not None and states.can_transition(states.LIFECYCLE_TRANSITIONS,
                                                     dev.lifecycle, target):
            done.append(_apply(s, dev, target, reason=why, actor=BY_CONDUCTOR))
    return done


def bound(s: Session, dev: m.Device) -> list[dict[str, str]]:
    """Who holds ``dev`` now: its ARQs (uuid, instance, state) and a v1 attachment."""
    found = [{"accelerator_request": arq, "instance_uuid": instance, "state": state}
             for _dev, arq, instance, state in s.execute(
                 holders.holding_arqs().where(m.Deployable.device_id == dev.id)
                 .order_by(m.ExtendedAcceleratorRequest.id))]
    if dev.attached_to is not None:
        found.append({"attached_to": dev.attached_to, "attach_type": dev.attach_type or ""})
    return found


def status(db: Database, uuid: str) -> dict[str, Any]:
    """The device's life cycle and maintenance as the operator answers show them."""
    with db.reader() as s:
        dev = s.execute(select(m.Device).where(m.Device.uuid == uuid)).scalar_one_or_none()
        if dev is None:
            raise exception.AcceleratorNotFound(f"Accelerator {uuid} not found.")
        return view(dev, bound(s, dev))


def identity(db: Database, uuid: str) -> tuple[str | None, str | None, str | None]:
    """(host, driver, identity) of the device: where its agent resets it."""
    with db.reader() as s:
        row = s.execute(select(m.Device.hostname, m.Device.driver_name, m.Device.identity)
                        .where(m.Device.uuid == uuid)).one_or_none()
    if row is None:
        raise exception.AcceleratorNotFound(f"Accelerator {uuid} not found.")
    return row.hostname, row.driver_name, row.identity


def maintenance_view(in_maintenance: bool, held: bool) -> str | None:
    """What an operator reads: None (in service), draining (still held) or drained."""
    if not in_maintenance:
        return None
    return states.MAINTENANCE_DRAINING if held else states.MAINTENANCE_DRAINED


def _iso(value: datetime.datetime | None) -> str | None:
    return None if value is None else value.replace(tzinfo=datetime.UTC).isoformat()


def view(dev: m.Device, held: list[dict[str, str]]) -> dict[str, Any]:
    """The device's health life cycle and maintenance, with who holds it."""
    return {"uuid": dev.uuid, "host": dev.hostname, "health": dev.health,
            "lifecycle": dev.lifecycle, "lifecycle_reason": dev.lifecycle_reason,
            "lifecycle_since": _iso(dev.lifecycle_at),
            "maintenance": maintenance_view(bool(dev.maintenance), bool(held)),
            "maintenance_reason": dev.maintenance_reason,
            "maintenance_since": _iso(dev.maintenance_at),
            "schedulable": not states.unusable_reasons(
                dev.state, dev.status, dev.health, dev.lifecycle, bool(dev.maintenance)),
            "bound": held}

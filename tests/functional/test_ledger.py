"""The allocation ledger (objects/ledger.py, docs/ledger.md) on each backend: a bind,
unbind, delete or v1 attach writes exactly its lines in its own transaction, deleted ARQs
keep theirs, device-hours from known, open and clipped holdings, and the retention purge.
"""

from __future__ import annotations

import datetime
import uuid as uuidlib

import pytest
from sqlalchemy import select, text

from acceld import exception
from acceld.conductor.binding import Binder
from acceld.conductor.manager import LEDGER_PURGER, ConductorManager
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import accelerators, arqs, ledger
from tests import helpers

PROJECT = "proj1"
T0 = datetime.datetime(2026, 1, 1)


def _fields(rp_uuid: str, instance: str | None = None) -> dict[str, str]:
    return {"hostname": "host1", "device_rp_uuid": rp_uuid,
            "instance_uuid": instance or str(uuidlib.uuid4()), "project_id": PROJECT,
            "user_id": "user1"}


def _lines(db: Database) -> list[dict]:
    return list(ledger.list_entries(db))


def _in_use(db: Database) -> int:
    with db.reader() as s:
        return len(s.execute(select(m.AttachHandle.id)
                             .where(m.AttachHandle.in_use.is_(True))).all())


def _device_of(db: Database, rp_uuid: str) -> tuple[str, str]:
    with db.reader() as s:
        return s.execute(select(m.Device.uuid, m.Deployable.uuid)
                         .join(m.Deployable, m.Deployable.device_id == m.Device.id)
                         .where(m.Deployable.rp_uuid == rp_uuid)).one()


def test_a_bind_and_an_unbind_write_exactly_their_lines(db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    device, deployable = _device_of(db, rp_uuid)
    binder = Binder(db)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    instance = str(uuidlib.uuid4())
    binder.bind({uuid: _fields(rp_uuid, instance)}, PROJECT)
    handle = arqs.get(db, uuid, project_id=PROJECT)["attach_handle_uuid"]
    (bound,) = _lines(db)
    assert {k: bound[k] for k in ledger.COLUMNS if k != "at"} == {
        "event": "bind", "kind": "arq", "device_uuid": device, "deployable_uuid": deployable,
        "attach_handle_uuid": handle, "arq_uuid": uuid, "instance_uuid": instance,
        "host": "host1", "project_id": PROJECT, "user_id": "user1", "from_state": "Initial",
        "to_state": "Bound", "detail": None}
    binder.unbind([uuid], PROJECT)
    binder.unbind([uuid], PROJECT)                 # idempotent: no second line
    bound, unbound = _lines(db)
    assert (unbound["event"], unbound["from_state"], unbound["to_state"]) == (
        "unbind", "Bound", "Unbound")
    assert (unbound["device_uuid"], unbound["arq_uuid"], unbound["instance_uuid"],
            unbound["project_id"]) == (device, uuid, instance, PROJECT)
    assert unbound["at"] >= bound["at"]
    # bound again from Unbound: the line says so
    binder.bind({uuid: _fields(rp_uuid)}, PROJECT)
    assert _lines(db)[-1]["from_state"] == "Unbound"


def test_a_failed_bind_writes_no_line(db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    binder = Binder(db)
    first, second = (arqs.create(db, profile, PROJECT)[0]["uuid"] for _ in range(2))
    binder.bind({first: _fields(rp_uuid)}, PROJECT)
    with pytest.raises(exception.NoFreeAttachHandle):
        binder.bind({second: _fields(rp_uuid)}, PROJECT)
    with pytest.raises(exception.ARQBadState):      # Bound already
        binder.bind({first: _fields(rp_uuid)}, PROJECT)
    assert arqs.get(db, second, project_id=PROJECT)["state"] == "BindFailed"
    assert [line["arq_uuid"] for line in _lines(db)] == [first]


def test_a_bind_whose_line_cannot_be_written_changes_nothing(db: Database) -> None:
    """The line is written in the bind's transaction: with no ledger table the bind
    fails whole (the claim rolls back with it)."""
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=1)
    uuid = arqs.create(db, profile, PROJECT)[0]["uuid"]
    with db.write_rows() as conn:
        conn.execute(text("ALTER TABLE ledger RENAME TO ledger_away"))
    try:
        with pytest.raises(Exception, match="ledger"):
            Binder(db).bind({uuid: _fields(rp_uuid)}, PROJECT)
    finally:
        with db.write_rows() as conn:
            conn.execute(text("ALTER TABLE ledger_away RENAME TO ledger"))
    assert arqs.get(db, uuid, project_id=PROJECT)["state"] == "Initial"
    assert _in_use(db) == 0
    assert _lines(db) == []


def test_deleting_arqs_keeps_their_lines_and_adds_the_freeing_one(db: Database) -> None:
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    binder = Binder(db)
    bound, fresh = (arqs.create(db, profile, PROJECT)[0]["uuid"] for _ in range(2))
    instance = str(uuidlib.uuid4())
    binder.bind({bound: _fields(rp_uuid, instance)}, PROJECT)
    arqs.delete_by_uuids(db, [fresh], project_id=PROJECT, service=False)   # held nothing
    arqs.delete_by_instance(db, instance, project_id=PROJECT, user_id="nova")
    with pytest.raises(exception.ARQNotFound):
        arqs.get(db, bound, project_id=PROJECT)
    lines = _lines(db)
    assert [(x["event"], x["arq_uuid"], x["to_state"], x["user_id"]) for x in lines] == [
        ("bind", bound, "Bound", "user1"), ("unbind", bound, "Deleted", "nova")]
    assert _in_use(db) == 0


def test_a_v1_attach_and_detach_write_their_lines(db: Database) -> None:
    rp_uuid, _ = helpers.make_qat_inventory(db, handles=2)
    device, _ = _device_of(db, rp_uuid)
    accelerators.attach(db, device, "host", "host1")
    accelerators.detach(db, device)
    accelerators.detach(db, device)                # not attached: no line
    assert [(x["event"], x["kind"], x["device_uuid"], x["host"], x["to_state"])
            for x in _lines(db)] == [
        ("attach", "accelerator", device, "host1", "attached:host"),
        ("detach", "accelerator", device, "host1", "detached")]


def _hold(db: Database, device: str, arq: str | None, project: str, start: float,
          end: float | None) -> None:
    """A holding from ``start`` to ``end`` hours after T0 (None: still open)."""
    at = T0 + datetime.timedelta(hours=start)
    with db.write_rows() as conn:
        ledger.record(conn, ledger.Entry(ledger.BIND, ledger.KIND_ARQ, device, arq_uuid=arq,
                                         project_id=project, host="h1", at=at))
        if end is not None:
            ledger.record(conn, ledger.Entry(ledger.UNBIND, ledger.KIND_ARQ, device,
                                             arq_uuid=arq, project_id=project, host="h1",
                                             at=T0 + datetime.timedelta(hours=end)))


def test_device_hours_pair_clip_and_count_open_holdings(db: Database) -> None:
    dev_a, dev_b = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    _hold(db, dev_a, "arq-1", "p1", 0, 2)          # 2 h, all inside
    _hold(db, dev_a, "arq-2", "p1", 3, 10)         # clipped by until (8): 5 h
    _hold(db, dev_b, "arq-3", "p1", -5, 1)         # clipped by since (0): 1 h
    _hold(db, dev_b, "arq-4", "p2", 4, None)       # open: up to until, 4 h
    _hold(db, dev_b, "arq-5", "p2", -3, -1)        # ended before since: nothing
    _hold(db, dev_a, None, "p2", 9, None)          # begins after until: nothing
    with db.write_rows() as conn:                  # a line that holds nothing
        ledger.record(conn, ledger.Entry("quarantine", "health", dev_a,
                                         at=T0 + datetime.timedelta(hours=1)))
    until = T0 + datetime.timedelta(hours=8)
    got = ledger.usage(db, since=T0, until=until)
    assert got == [{"project": "p1", "device_hours": 8.0, "holdings": 3},
                   {"project": "p2", "device_hours": 4.0, "holdings": 1}]
    assert ledger.usage(db, since=T0, until=until, project_id="p2", group_by="device") == [
        {"device": dev_b, "device_hours": 4.0, "holdings": 1}]
    by_device = ledger.usage(db, since=T0, until=until, group_by="device")
    assert {r["device"]: r["device_hours"] for r in by_device} == {dev_a: 7.0, dev_b: 5.0}
    # a window inside one holding counts the window
    assert ledger.usage(db, since=T0 + datetime.timedelta(hours=4),
                        until=T0 + datetime.timedelta(minutes=270), project_id="p1") == [
        {"project": "p1", "device_hours": 0.5, "holdings": 1}]


def test_the_purge_keeps_open_holdings_and_is_bounded(db: Database) -> None:
    dev = str(uuidlib.uuid4())
    _hold(db, dev, "old-closed", "p1", 0, 1)
    _hold(db, dev, "old-open", "p1", 2, None)
    _hold(db, dev, "recent", "p1", 100, 101)
    cutoff = T0 + datetime.timedelta(hours=50)
    assert ledger.purge(db, cutoff, batch=1) == 1          # bounded
    assert ledger.purge(db, cutoff) == 1
    assert ledger.purge(db, cutoff) == 0                   # idempotent
    assert [(x["arq_uuid"], x["event"]) for x in _lines(db)] == [
        ("old-open", "bind"), ("recent", "bind"), ("recent", "unbind")]
    # still counted after the purge
    assert ledger.usage(db, since=T0, until=T0 + datetime.timedelta(hours=4),
                        project_id="p1") == [
        {"project": "p1", "device_hours": 2.0, "holdings": 1}]


def test_the_conductor_purges_past_retention_only_when_configured(db: Database) -> None:
    dev = str(uuidlib.uuid4())
    _hold(db, dev, "a", "p1", 0, 1)
    keep = ConductorManager(helpers.make_conf(), db, agents=None)
    assert keep.purge_ledger(now=T0 + datetime.timedelta(days=400)) == 0
    mgr = ConductorManager(helpers.make_conf(ledger={"retention_days": 30}), db, agents=None)
    assert mgr.ring.owns(LEDGER_PURGER)            # alone on the ring: it purges
    assert mgr.purge_ledger(now=T0 + datetime.timedelta(days=30)) == 0   # not old enough
    assert mgr.purge_ledger(now=T0 + datetime.timedelta(days=31)) == 2
    assert _lines(db) == []

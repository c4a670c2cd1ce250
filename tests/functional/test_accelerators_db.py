"""v1 accelerator records on a real database: create, compare-and-swap, life cycle, attach.

Every write in ``objects.accelerators`` is one conditional UPDATE; these tests check the
conflict each lost compare-and-swap turns into on SQLite, PostgreSQL and MariaDB, and race
eight threads on one row to show that exactly one writer wins and the others get a domain
answer (no-op or conflict), never a database error.
"""

from __future__ import annotations

import threading
import uuid as uuidlib

import pytest
from sqlalchemy import insert, select, update

from acceld import exception, reports, states
from acceld.agent.drivers.base import DriverContext
from acceld.agent.drivers.fake import FakeDriver
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import accelerators as acc
from acceld.objects import identity, inventory
from tests.helpers import make_conf

HOST = "node1"
THREADS = 8


def discover(db: Database, host: str, count: int, tmp_path) -> list[str]:
    """Apply a fake report for ``host``; returns its device uuids in bus order."""
    conf = make_conf(fake_driver={"device_count": count})
    devs = tuple(FakeDriver(DriverContext(conf, host, str(tmp_path))).discover())
    inventory.apply_report(db, reports.InventoryReport(host=host, epoch="e", seq=1, drivers=(
        reports.DriverReport(name="fake", version="1.0.0", devices=devs),)))
    return [identity.device_uuid(host, "fake", d.identity) for d in devs]


def make_ready(db: Database, uuid: str) -> None:
    _acc, op = acc.begin_transition(db, uuid, states.READY)
    assert acc.finish_transition(db, uuid, op.op_id, ok=True)
    assert acc.get_accelerator(db, uuid)["state"] == states.READY


@pytest.fixture
def devices(db, tmp_path) -> list[str]:
    return discover(db, HOST, 4, tmp_path)


def test_create_and_duplicates(db):
    given = str(uuidlib.uuid4())
    rec = acc.create_accelerator(db, "declared-1", uuid=given)
    assert (rec["uuid"], rec["name"], rec["host"], rec["state"], rec["health"],
            rec["revision"], rec["acc_specs"], rec["attached_to"]) == (
        given, "declared-1", None, states.INACTIVE, states.HEALTH_OK, 1, {}, None)
    assert acc.get_accelerator(db, given)["name"] == "declared-1"
    with pytest.raises(exception.DuplicateName, match="name 'declared-1'"):
        acc.create_accelerator(db, "declared-1")
    with pytest.raises(exception.DuplicateName, match=f"uuid '{given}'"):
        acc.create_accelerator(db, "declared-2", uuid=given)
    assert [a["name"] for a in acc.list_accelerators(db)] == ["declared-1"]
    other = acc.create_accelerator(db, "declared-2")
    assert uuidlib.UUID(other["uuid"]) and other["uuid"] != given
    with pytest.raises(exception.AcceleratorNotFound):
        acc.get_accelerator(db, str(uuidlib.uuid4()))


def test_update_acc_specs_compare_and_swap(db):
    uuid = acc.create_accelerator(db, "a")["uuid"]
    rec = acc.update_acc_specs(db, uuid, {"num": 2, "remote": 0}, revision=1)
    assert (rec["acc_specs"], rec["revision"]) == ({"num": 2, "remote": 0}, 2)
    with pytest.raises(exception.RevisionConflict, match="revision 2, not 1"):
        acc.update_acc_specs(db, uuid, {"num": 3}, revision=1)
    assert acc.get_accelerator(db, uuid)["acc_specs"] == {"num": 2, "remote": 0}
    assert acc.update_acc_specs(db, uuid, {"num": 3}, revision=2)["revision"] == 3
    with pytest.raises(exception.AcceleratorNotFound):
        acc.update_acc_specs(db, str(uuidlib.uuid4()), {}, revision=1)


def test_life_cycle(db, devices):
    uuid = devices[0]
    rec, op = acc.begin_transition(db, uuid, states.READY)
    assert rec["state"] == states.INSTALLING
    assert (op.device_uuid, op.host, op.driver, op.operation) == (uuid, HOST, "fake",
                                                                  "install")
    assert op.identity == acc.identity_of(db, uuid) == "0000:3b:00.0"
    # Asking again while installing is a no-op; asking the opposite is refused.
    assert acc.begin_transition(db, uuid, states.READY)[1] is None
    with pytest.raises(exception.InvalidStateTransition):
        acc.begin_transition(db, uuid, states.INACTIVE)
    assert [o.op_id for o in acc.stalled_operations(db, m.utcnow())] == [op.op_id]
    assert acc.finish_transition(db, uuid, "not-the-op", ok=True) is False
    assert acc.finish_transition(db, uuid, op.op_id, ok=True) is True
    assert acc.finish_transition(db, uuid, op.op_id, ok=True) is False   # duplicate
    rec = acc.get_accelerator(db, uuid)
    assert (rec["state"], rec["last_error"]) == (states.READY, None)
    assert acc.begin_transition(db, uuid, states.READY)[1] is None      # already there
    rec, op = acc.begin_transition(db, uuid, states.INACTIVE)
    assert (rec["state"], op.operation) == (states.UNINSTALLING, "uninstall")
    assert acc.finish_transition(db, uuid, op.op_id, ok=True)
    assert acc.get_accelerator(db, uuid)["state"] == states.INACTIVE
    assert acc.stalled_operations(db, m.utcnow()) == []
    with pytest.raises(exception.InvalidStateTransition):
        acc.begin_transition(db, uuid, "exploded")
    with pytest.raises(exception.InvalidStateTransition):
        acc.begin_transition(db, uuid, states.INSTALLING)


def test_failed_install_goes_to_error_and_can_retry(db, devices):
    uuid = devices[1]
    _rec, op = acc.begin_transition(db, uuid, states.READY)
    assert acc.finish_transition(db, uuid, op.op_id, ok=False, error="firmware refused")
    rec = acc.get_accelerator(db, uuid)
    assert (rec["state"], rec["last_error"]) == (states.ERROR, "firmware refused")
    assert acc.finish_transition(db, uuid, op.op_id, ok=True) is False
    rec, op2 = acc.begin_transition(db, uuid, states.READY)            # retry from error
    assert (rec["state"], rec["last_error"]) == (states.INSTALLING, None)
    assert op2.op_id != op.op_id
    acc.finish_transition(db, uuid, op2.op_id, ok=True)
    assert acc.get_accelerator(db, uuid)["state"] == states.READY


def test_transition_needs_a_host(db):
    uuid = acc.create_accelerator(db, "declared")["uuid"]
    with pytest.raises(exception.NotReady):
        acc.begin_transition(db, uuid, states.READY)
    assert acc.get_accelerator(db, uuid)["state"] == states.INACTIVE
    with pytest.raises(exception.AcceleratorNotFound):
        acc.begin_transition(db, str(uuidlib.uuid4()), states.READY)


def test_revision_grows_with_every_write(db, devices):
    uuid = devices[0]
    revs = [acc.get_accelerator(db, uuid)["revision"]]
    _rec, op = acc.begin_transition(db, uuid, states.READY)
    revs.append(acc.get_accelerator(db, uuid)["revision"])
    acc.finish_transition(db, uuid, op.op_id, ok=True)
    revs.append(acc.get_accelerator(db, uuid)["revision"])
    acc.attach(db, uuid, "instance", "vm")
    revs.append(acc.get_accelerator(db, uuid)["revision"])
    acc.detach(db, uuid)
    revs.append(acc.get_accelerator(db, uuid)["revision"])
    assert revs == [1, 2, 3, 4, 5]


def test_attach_compare_and_swap(db, devices):
    uuid = devices[0]
    with pytest.raises(exception.NotReady):
        acc.attach(db, uuid, "instance", "vm-1")                      # inactive
    make_ready(db, uuid)
    rec = acc.attach(db, uuid, "instance", "vm-1")
    assert rec["attached_to"] == {"type": "instance", "id": "vm-1",
                                  "hot_plug": states.HOT_ATTACHING}
    assert acc.attachment(db, uuid) == ("instance", "vm-1", HOST)
    with pytest.raises(exception.AlreadyAttached, match="vm-1"):
        acc.attach(db, uuid, "instance", "vm-2")
    with pytest.raises(exception.DeviceInUse, match=r"held by instance vm-1 \(attached\)"):
        acc.begin_transition(db, uuid, states.INACTIVE)              # detach first
    acc.detach(db, uuid)
    assert acc.attachment(db, uuid) == (None, None, HOST)
    acc.detach(db, uuid)                                              # idempotent
    with db.writer() as s:
        s.execute(update(m.Device).where(m.Device.uuid == uuid)
                  .values(health=states.HEALTH_UNKNOWN))
    with pytest.raises(exception.NotReady, match="health unknown"):
        acc.attach(db, uuid, "instance", "vm-2")
    with pytest.raises(exception.AcceleratorNotFound):
        acc.attach(db, str(uuidlib.uuid4()), "instance", "vm-2")


def _add_arq(db: Database, dep_uuid: str, state: str) -> str:
    arq = str(uuidlib.uuid4())
    with db.writer() as s:
        dp = s.execute(select(m.DeviceProfile.id).where(m.DeviceProfile.name == "dp")
                       ).scalar()
        if dp is None:
            s.execute(insert(m.DeviceProfile).values(
                uuid=str(uuidlib.uuid4()), name="dp", profile_json="[]",
                created_at=m.utcnow()))
            dp = s.execute(select(m.DeviceProfile.id)).scalar_one()
        dep_id = s.execute(select(m.Deployable.id).where(m.Deployable.uuid == dep_uuid)
                           ).scalar_one()
        s.execute(insert(m.ExtendedAcceleratorRequest).values(
            uuid=arq, state=state, substate=state, device_profile_id=dp,
            device_profile_group_id=0, hostname=HOST, instance_uuid="vm-1",
            deployable_id=dep_id, created_at=m.utcnow()))
    return arq


def test_detach_refused_while_bound_requests_exist(db, devices):
    uuid = devices[0]
    make_ready(db, uuid)
    acc.attach(db, uuid, "instance", "vm-1")
    with db.reader() as s:
        dev_id = s.execute(select(m.Device.id).where(m.Device.uuid == uuid)).scalar_one()
        dep_uuid = s.execute(select(m.Deployable.uuid)
                             .where(m.Deployable.device_id == dev_id)).scalar_one()
    _add_arq(db, dep_uuid, "Initial")                       # not an allocation
    arq = _add_arq(db, dep_uuid, "Bound")
    with pytest.raises(exception.AllocationsExist, match="1 allocation"):
        acc.detach(db, uuid)
    assert acc.attachment(db, uuid)[1] == "vm-1"
    make_ready(db, devices[1])                              # other devices are free
    acc.attach(db, devices[1], "instance", "vm-2")
    acc.detach(db, devices[1])
    assert acc.attachment(db, devices[1]) == (None, None, HOST)
    with db.writer() as s:
        s.execute(update(m.ExtendedAcceleratorRequest)
                  .where(m.ExtendedAcceleratorRequest.uuid == arq).values(state="Deleting"))
    acc.detach(db, uuid)
    assert acc.attachment(db, uuid) == (None, None, HOST)


def test_list_filters_and_pagination(db, tmp_path):
    uuids = discover(db, HOST, 4, tmp_path)
    other = discover(db, "node2", 2, tmp_path)
    declared = acc.create_accelerator(db, "declared")["uuid"]
    everything = [a["uuid"] for a in acc.list_accelerators(db)]
    assert everything == uuids + other + [declared]                   # id order
    assert [a["uuid"] for a in acc.list_accelerators(db, host="node2")] == other
    assert [a["device_type"] for a in acc.list_accelerators(db, host=HOST)] == [
        "GPU", "FPGA", "QAT", "NIC"]
    assert [a["uuid"] for a in acc.list_accelerators(db, device_type="GPU")] == [
        uuids[0], other[0]]
    make_ready(db, uuids[2])
    acc.attach(db, uuids[2], "instance", "vm-9")
    assert [a["uuid"] for a in acc.list_accelerators(db, state=states.READY)] == [uuids[2]]
    assert [a["uuid"] for a in acc.list_accelerators(db, instance_uuid="vm-9")] == [
        uuids[2]]
    assert list(acc.list_accelerators(db, instance_uuid="vm-0")) == []
    assert acc.list_accelerators(db, host=HOST, state=states.INACTIVE, device_type="NIC"
                                 ).items[0]["uuid"] == uuids[3]
    pages, marker = [], None
    while True:
        page = acc.list_accelerators(db, limit=3, marker=marker).items
        if not page:
            break
        pages.append([a["uuid"] for a in page])
        marker = page[-1]["uuid"]
    assert pages == [everything[0:3], everything[3:6], everything[6:7]]
    assert [a["uuid"] for a in acc.list_accelerators(db, host=HOST, marker=uuids[1],
                                                     limit=1)] == [uuids[2]]
    with pytest.raises(exception.InvalidInput):
        acc.list_accelerators(db, marker=str(uuidlib.uuid4()))
    assert {h: len(list(acc.list_accelerators(db, host=h))) for h in (HOST, "node2")} == {
        HOST: 4, "node2": 2}


def _race(fn, n: int = THREADS) -> list[tuple[str, object]]:
    """Run ``fn()`` in ``n`` threads released together; returns (kind, value) each."""
    barrier = threading.Barrier(n)
    results: list[tuple[str, object]] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        try:
            out = ("ok", fn())
        except exception.AccelDError as exc:
            out = ("domain", exc)
        except Exception as exc:  # noqa: BLE001 - the assertion reports it
            out = ("error", exc)
        with lock:
            results.append(out)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == n, "a racing thread hung"
    return results


def test_racing_begin_transition(db, devices):
    uuid = devices[0]
    results = _race(lambda: acc.begin_transition(db, uuid, states.READY))
    assert [r for r in results if r[0] == "error"] == []
    ops = [v[1] for kind, v in results if kind == "ok" and v[1] is not None]
    noops = [v for kind, v in results if kind == "ok" and v[1] is None]
    conflicts = [v for kind, v in results if kind == "domain"]
    assert len(ops) == 1
    assert len(noops) + len(conflicts) == THREADS - 1
    assert all(isinstance(c, exception.InvalidStateTransition) for c in conflicts)
    assert all(r["state"] == states.INSTALLING for r, _op in noops)
    rec = acc.get_accelerator(db, uuid)
    assert (rec["state"], rec["revision"]) == (states.INSTALLING, 2)
    assert [o.op_id for o in acc.stalled_operations(db, m.utcnow())] == [ops[0].op_id]


def test_racing_attach(db, devices):
    uuid = devices[0]
    make_ready(db, uuid)
    it = iter(f"vm-{i}" for i in range(THREADS))
    lock = threading.Lock()

    def attach():
        with lock:
            target = next(it)
        return acc.attach(db, uuid, "instance", target)

    results = _race(attach)
    assert [r for r in results if r[0] == "error"] == []
    won = [v for kind, v in results if kind == "ok"]
    lost = [v for kind, v in results if kind == "domain"]
    assert len(won) == 1 and len(lost) == THREADS - 1
    assert all(isinstance(e, exception.AlreadyAttached) for e in lost)
    winner = won[0]["attached_to"]["id"]
    assert acc.attachment(db, uuid) == ("instance", winner, HOST)
    assert acc.get_accelerator(db, uuid)["revision"] == 4

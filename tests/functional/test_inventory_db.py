"""Inventory reports applied to a real database (SQLite, PostgreSQL, MariaDB).

Reports are built from the fake driver, whose devices are deterministic per host: device
``i`` has PCI bus ``0x3b + i`` and type GPU, FPGA, QAT, NIC in turn (1, 1, 4 and 2 attach
handles), with one deployable and two attributes (``rc``, ``trait0``) each. Every test
asserts the rows ``objects.inventory.apply_report`` leaves behind, table by table.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
from sqlalchemy import select, update

import acceld
from acceld import reports, states
from acceld.agent.drivers.base import DriverContext
from acceld.agent.drivers.fake import FakeDriver
from acceld.db import migration
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import accelerators, identity, inventory
from tests.helpers import make_conf

HOST = "node1"
TABLES = ("devices", "controlpath_ids", "deployables", "attributes", "attach_handles")
HANDLES_PER_TYPE = {"GPU": 1, "FPGA": 1, "QAT": 4, "NIC": 2}


def fake_devices(host: str, count: int, tmp_path) -> tuple[reports.Device, ...]:
    conf = make_conf(fake_driver={"device_count": count})
    return tuple(FakeDriver(DriverContext(conf, host, str(tmp_path))).discover())


class Agent:
    """Sends numbered reports for one host, the way the agent's journal does."""

    def __init__(self, host: str = HOST, epoch: str = "epoch-1") -> None:
        self.host, self.epoch, self.seq = host, epoch, 0

    def report(self, devices, state: str = states.DRIVER_INSTALLED,
               error: str | None = None) -> reports.InventoryReport:
        self.seq += 1
        drv = reports.DriverReport(name="fake", version="1.0.0", state=state, error=error,
                                   devices=tuple(devices))
        return reports.InventoryReport(host=self.host, epoch=self.epoch, seq=self.seq,
                                       drivers=(drv,))

    def apply(self, db: Database, devices, **kw) -> inventory.ApplyResult:
        return inventory.apply_report(db, self.report(devices, **kw))


def rows(db: Database, table: str, **where) -> list[dict]:
    t = m.Base.metadata.tables[table]
    q = select(t).order_by(t.c.id)
    for col, value in where.items():
        q = q.where(t.c[col] == value)
    with db.reader() as s:
        return [dict(r) for r in s.execute(q).mappings()]


def counts(db: Database) -> dict[str, int]:
    return {t: len(rows(db, t)) for t in TABLES}


def device(db: Database, name: str) -> dict:
    return rows(db, "devices", name=name)[0]      # names are unique (uniq_devices0name)


def expected_counts(devs) -> dict[str, int]:
    n = len(devs)
    handles = sum(HANDLES_PER_TYPE[d.type] for d in devs)
    return {"devices": n, "controlpath_ids": n, "deployables": n, "attributes": 2 * n,
            "attach_handles": handles}


def replace_dep(dev: reports.Device, **changes) -> reports.Device:
    (dep,) = dev.deployables
    return dataclasses.replace(dev, deployables=(dataclasses.replace(dep, **changes),))


@pytest.fixture
def four(db, tmp_path) -> tuple[Agent, tuple[reports.Device, ...]]:
    """The database after a first report of 4 devices: (the agent, its devices)."""
    agent, devs = Agent(), fake_devices(HOST, 4, tmp_path)
    agent.apply(db, devs)
    return agent, devs


def test_first_report_creates_rows_with_deterministic_uuids(db, tmp_path):
    devs = fake_devices(HOST, 4, tmp_path)
    result = Agent().apply(db, devs)
    assert result.changed and not result.stale
    assert counts(db) == {"devices": 4, "controlpath_ids": 4, "deployables": 4,
                          "attributes": 8, "attach_handles": 8}
    assert sorted(result.changed_devices) == sorted(
        identity.device_uuid(HOST, "fake", d.identity) for d in devs)
    for dev in devs:
        row = device(db, f"{HOST}-fake-{dev.type.lower()}-{devs.index(dev)}")
        dev_uuid = identity.device_uuid(HOST, "fake", dev.identity)
        assert (row["uuid"], row["hostname"], row["driver_name"], row["identity"]) == (
            dev_uuid, HOST, "fake", dev.identity)
        assert (row["state"], row["health"], row["type"], row["vendor"], row["model"]) == (
            states.INACTIVE, states.HEALTH_OK, dev.type, dev.vendor, dev.model)
        (cpid,) = rows(db, "controlpath_ids", device_id=row["id"])
        assert (cpid["uuid"], cpid["cpid_type"]) == (identity.controlpath_uuid(dev_uuid), "PCI")
        (dep,) = rows(db, "deployables", device_id=row["id"])
        dep_uuid = identity.deployable_uuid(dev_uuid, dev.deployables[0].name)
        assert (dep["uuid"], dep["rp_uuid"], dep["num_accelerators"]) == (
            dep_uuid, identity.rp_uuid(dep_uuid), HANDLES_PER_TYPE[dev.type])
        attrs = {a["key"]: (a["value"], a["uuid"]) for a in
                 rows(db, "attributes", deployable_id=dep["id"])}
        assert attrs == {k: (v, identity.attribute_uuid(dep_uuid, k))
                         for k, v in dev.deployables[0].attributes}
        handles = rows(db, "attach_handles", deployable_id=dep["id"])
        assert sorted(h["uuid"] for h in handles) == sorted(
            identity.attach_handle_uuid(dep_uuid, h.info_key)
            for h in dev.deployables[0].attach_handles)
        assert all(h["cpid_id"] == cpid["id"] and not h["in_use"] for h in handles)
    assert [(d["host"], d["name"], d["state"], d["device_count"]) for d in rows(
        db, "driver_states")] == [(HOST, "fake", states.DRIVER_INSTALLED, 4)]
    (svc,) = rows(db, "services")
    assert (svc["host"], svc["binary"], svc["report_epoch"], svc["report_seq"]) == (
        HOST, acceld.AGENT_BINARY, "epoch-1", 1)
    assert svc["report_digest"] == Agent().report(devs).content_digest()


def test_same_uuids_on_a_second_database(db, backend, make_db_url, tmp_path):
    other = Database(make_db_url(backend))
    migration.upgrade(other)
    try:
        devs = fake_devices(HOST, 4, tmp_path)
        Agent().apply(db, devs)
        Agent().apply(other, devs)
        for table in TABLES:
            mine = sorted(r["uuid"] for r in rows(db, table))
            assert len(mine) == len(set(mine)) > 0
            assert mine == sorted(r["uuid"] for r in rows(other, table)), table
    finally:
        other.dispose()


def test_device_added(db, four, tmp_path):
    agent, _devs = four
    before = rows(db, "devices")
    six = fake_devices(HOST, 6, tmp_path)
    result = agent.apply(db, six)
    assert counts(db) == expected_counts(six) == {
        "devices": 6, "controlpath_ids": 6, "deployables": 6, "attributes": 12,
        "attach_handles": 10}
    assert sorted(result.changed_devices) == sorted(
        identity.device_uuid(HOST, "fake", d.identity) for d in six[4:])
    assert rows(db, "devices")[:4] == before        # existing rows untouched
    assert rows(db, "driver_states")[0]["device_count"] == 6


def test_device_removed_with_its_children(db, tmp_path):
    agent = Agent()
    agent.apply(db, fake_devices(HOST, 6, tmp_path))
    three = fake_devices(HOST, 3, tmp_path)
    result = agent.apply(db, three)
    assert counts(db) == {"devices": 3, "controlpath_ids": 3, "deployables": 3,
                          "attributes": 6, "attach_handles": 6}
    assert result.changed and result.changed_devices == ()
    assert sorted(r["identity"] for r in rows(db, "devices")) == sorted(
        d.identity for d in three)
    for child, parent, fk in (("controlpath_ids", "devices", "device_id"),
                              ("deployables", "devices", "device_id"),
                              ("attributes", "deployables", "deployable_id"),
                              ("attach_handles", "deployables", "deployable_id")):
        assert {r[fk] for r in rows(db, child)} == {r["id"] for r in rows(db, parent)}
    assert rows(db, "driver_states")[0]["device_count"] == 3


def test_changed_device_updates_only_that_device(db, four):
    agent, devs = four
    before = {r["identity"]: r for r in rows(db, "devices")}
    before_cpids = rows(db, "controlpath_ids")
    changed = dataclasses.replace(devs[1], vendor="1af4", model="beef",
                                  std_board_info=(("class", "real"),),
                                  vendor_board_info=(("serial", "NEW"),))
    result = agent.apply(db, (devs[0], changed, *devs[2:]))
    after = {r["identity"]: r for r in rows(db, "devices")}
    target = after[changed.identity]
    assert result.changed_devices == (target["uuid"],)
    assert (target["vendor"], target["model"]) == ("1af4", "beef")
    assert (target["std_board_info"], target["vendor_board_info"]) == (
        '{"class":"real"}', '{"serial":"NEW"}')
    assert target["updated_at"] is not None and target["id"] == before[changed.identity]["id"]
    assert {k: r for k, r in after.items() if k != changed.identity} == {
        k: r for k, r in before.items() if k != changed.identity}
    assert rows(db, "controlpath_ids") == before_cpids
    assert counts(db) == expected_counts(devs)


def test_deployable_num_accelerators_change(db, four):
    agent, devs = four
    before = {r["name"]: r for r in rows(db, "deployables")}
    qat = replace_dep(devs[2], num_accelerators=16)
    agent.apply(db, (*devs[:2], qat, devs[3]))
    after = {r["name"]: r for r in rows(db, "deployables")}
    name = qat.deployables[0].name
    assert (after[name]["num_accelerators"], after[name]["uuid"], after[name]["id"]) == (
        16, before[name]["uuid"], before[name]["id"])
    assert {k: v for k, v in after.items() if k != name} == {
        k: v for k, v in before.items() if k != name}


def test_attribute_value_change_add_remove(db, four):
    agent, devs = four
    gpu = devs[0]
    (dep_row,) = rows(db, "deployables", name=gpu.deployables[0].name)
    before = {a["key"]: a for a in rows(db, "attributes", deployable_id=dep_row["id"])}
    others = [a for a in rows(db, "attributes") if a["deployable_id"] != dep_row["id"]]
    new = replace_dep(gpu, attributes=(("rc", "CUSTOM_GPU"), ("trait1", "CUSTOM_NEW")))
    agent.apply(db, (new, *devs[1:]))
    after = {a["key"]: a for a in rows(db, "attributes", deployable_id=dep_row["id"])}
    assert {k: a["value"] for k, a in after.items()} == {"rc": "CUSTOM_GPU",
                                                         "trait1": "CUSTOM_NEW"}
    assert after["rc"]["id"] == before["rc"]["id"]      # updated in place
    assert after["trait1"]["uuid"] == identity.attribute_uuid(dep_row["uuid"], "trait1")
    assert [a for a in rows(db, "attributes") if a["deployable_id"] != dep_row["id"]] == \
        others


def test_attach_handle_added_and_removed(db, four):
    agent, devs = four
    qat = devs[2]
    (dep_row,) = rows(db, "deployables", name=qat.deployables[0].name)
    old = qat.deployables[0].attach_handles
    extra = reports.AttachHandle("PCI", (("bus", "ff"), ("function", "9")))
    agent.apply(db, (*devs[:2], replace_dep(qat, attach_handles=(*old[1:], extra)),
                     devs[3]))
    handles = rows(db, "attach_handles", deployable_id=dep_row["id"])
    assert sorted((h["attach_info"], h["uuid"]) for h in handles) == sorted(
        (h.info_key, identity.attach_handle_uuid(dep_row["uuid"], h.info_key))
        for h in (*old[1:], extra))
    assert len(rows(db, "attach_handles")) == 8


def test_failed_driver_marks_unknown_then_recovers(db, four):
    agent, devs = four
    before = counts(db)
    result = agent.apply(db, (), state=states.DRIVER_FAILED, error="discovery exploded")
    assert result.changed and len(result.changed_devices) == 4
    assert counts(db) == before
    assert {r["health"] for r in rows(db, "devices")} == {states.HEALTH_UNKNOWN}
    (drv,) = rows(db, "driver_states")
    assert (drv["state"], drv["error"], drv["device_count"]) == (
        states.DRIVER_FAILED, "discovery exploded", 0)
    agent.apply(db, devs)
    assert {r["health"] for r in rows(db, "devices")} == {states.HEALTH_OK}
    assert counts(db) == before
    (drv,) = rows(db, "driver_states")
    assert (drv["state"], drv["error"], drv["device_count"]) == (
        states.DRIVER_INSTALLED, None, 4)


def test_vanished_attached_device_kept_missing_until_detached(db, four):
    agent, devs = four
    uuid = identity.device_uuid(HOST, "fake", devs[3].identity)
    _acc, op = accelerators.begin_transition(db, uuid, states.READY)
    assert accelerators.finish_transition(db, uuid, op.op_id, ok=True)
    accelerators.attach(db, uuid, "instance", "vm-1")
    agent.apply(db, devs[:3])
    (row,) = rows(db, "devices", uuid=uuid)
    assert (row["health"], row["attached_to"], row["state"]) == (
        states.HEALTH_MISSING, "vm-1", states.READY)
    assert counts(db) == expected_counts(devs)          # its children are kept too
    assert agent.apply(db, devs[:3]).changed is False   # nothing new to say
    agent.apply(db, devs)                               # it comes back: ok again
    assert rows(db, "devices", uuid=uuid)[0]["health"] == states.HEALTH_OK
    agent.apply(db, devs[:3])                           # and vanishes again
    accelerators.detach(db, uuid)
    agent.apply(db, devs[:3])                           # same content, next report
    assert rows(db, "devices", uuid=uuid) == []
    assert counts(db) == expected_counts(devs[:3])


def test_declared_accelerator_is_adopted(db, tmp_path):
    devs = fake_devices(HOST, 2, tmp_path)
    declared = accelerators.create_accelerator(db, f"{HOST}-fake-fpga-1")
    assert declared["host"] is None
    result = Agent().apply(db, devs)
    assert counts(db) == expected_counts(devs)
    row = device(db, f"{HOST}-fake-fpga-1")
    assert (row["uuid"], row["hostname"], row["driver_name"], row["identity"]) == (
        declared["uuid"], HOST, "fake", devs[1].identity)
    assert (row["health"], row["type"], row["vendor"]) == (states.HEALTH_OK, "FPGA", "8086")
    (cpid,) = rows(db, "controlpath_ids", device_id=row["id"])
    assert cpid["uuid"] == identity.controlpath_uuid(declared["uuid"])
    (dep,) = rows(db, "deployables", device_id=row["id"])
    assert dep["uuid"] == identity.deployable_uuid(declared["uuid"],
                                                   devs[1].deployables[0].name)
    # The uuids reported as changed must be those of real rows: the adopted one is the
    # declared uuid, not the uuid the device would have had without the declaration.
    assert sorted(result.changed_devices) == sorted(
        [declared["uuid"], identity.device_uuid(HOST, "fake", devs[0].identity)])


def test_stale_report_ignored_and_new_epoch_accepted(db, tmp_path):
    devs = fake_devices(HOST, 4, tmp_path)
    inventory.apply_report(db, dataclasses.replace(Agent().report(devs), seq=10))
    late = reports.InventoryReport(host=HOST, epoch="epoch-1", seq=5, drivers=(
        reports.DriverReport("fake", "1.0.0", devices=devs[:1]),))
    assert inventory.apply_report(db, late) == inventory.ApplyResult(False, stale=True)
    assert inventory.apply_report(db, dataclasses.replace(late, seq=10)).stale
    assert counts(db) == expected_counts(devs)
    assert [(s["report_epoch"], s["report_seq"]) for s in rows(db, "services")] == [
        ("epoch-1", 10)]
    restarted = dataclasses.replace(late, epoch="epoch-2", seq=1)
    result = inventory.apply_report(db, restarted)
    assert (result.changed, result.stale) == (True, False)
    assert sorted(d["identity"] for d in result.removed) == sorted(
        d.identity for d in devs[1:])             # what the notifications announce
    assert counts(db) == expected_counts(devs[:1])
    assert [(s["report_epoch"], s["report_seq"]) for s in rows(db, "services")] == [
        ("epoch-2", 1)]


def test_reports_of_two_hosts_are_independent(db, tmp_path):
    a, b = Agent("node-a"), Agent("node-b")
    a.apply(db, fake_devices("node-a", 4, tmp_path))
    b.apply(db, fake_devices("node-b", 2, tmp_path))
    b_rows = {t: rows(db, t) for t in TABLES}
    b_devices = rows(db, "devices", hostname="node-b")
    assert len(b_devices) == 2 and len(rows(db, "devices", hostname="node-a")) == 4
    a.apply(db, fake_devices("node-a", 1, tmp_path))                 # a loses 3 devices
    a.apply(db, (), state=states.DRIVER_FAILED, error="x")           # then fails
    assert rows(db, "devices", hostname="node-b") == b_devices
    assert {r["health"] for r in b_devices} == {states.HEALTH_OK}
    b_ids = {r["id"] for r in b_devices}
    for t in ("controlpath_ids", "deployables"):
        assert [r for r in rows(db, t) if r["device_id"] in b_ids] == [
            r for r in b_rows[t] if r["device_id"] in b_ids]
    assert len(rows(db, "devices", hostname="node-a")) == 1
    drivers = {(d["host"], d["state"], d["device_count"]) for d in rows(db, "driver_states")}
    assert drivers == {("node-a", states.DRIVER_FAILED, 0),
                       ("node-b", states.DRIVER_INSTALLED, 2)}
    assert {s["host"]: s["report_seq"] for s in rows(db, "services")} == {
        "node-a": 3, "node-b": 1}


def test_in_use_of_a_handle_is_never_reset(db, four):
    agent, devs = four
    qat = devs[2]
    (dep_row,) = rows(db, "deployables", name=qat.deployables[0].name)
    used = qat.deployables[0].attach_handles[0]
    with db.writer() as s:
        s.execute(update(m.AttachHandle).where(m.AttachHandle.attach_info == used.info_key,
                                               m.AttachHandle.deployable_id == dep_row["id"])
                  .values(in_use=True))

    def in_use() -> dict[str, bool]:
        return {h["attach_info"]: bool(h["in_use"])
                for h in rows(db, "attach_handles", deployable_id=dep_row["id"])}

    # A changed report touching that deployable (attribute and handle type changes).
    changed = replace_dep(qat, attributes=(("rc", "CUSTOM_QAT2"),), attach_handles=tuple(
        dataclasses.replace(h, attach_type="TEST_PCI")
        for h in qat.deployables[0].attach_handles))
    agent.apply(db, (*devs[:2], changed, devs[3]))
    assert in_use()[used.info_key] is True
    assert sum(in_use().values()) == 1
    # The in-use handle vanishing from the report: it is kept, still in use.
    agent.apply(db, (*devs[:2], replace_dep(qat, attach_handles=()), devs[3]))
    assert in_use() == {used.info_key: True}
    # The whole device vanishing: it is held by the handle, so it stays, marked missing.
    agent.apply(db, (*devs[:2], devs[3]))
    assert in_use() == {used.info_key: True}
    assert device(db, f"{HOST}-fake-qat-2")["health"] == states.HEALTH_MISSING
    # Full diff again (digest forgotten) with the original report.
    with db.writer() as s:
        inventory.forget_digest(s, HOST)
    agent.apply(db, devs)
    assert in_use()[used.info_key] is True
    assert device(db, f"{HOST}-fake-qat-2")["health"] == states.HEALTH_OK
    assert len(in_use()) == 4


def test_first_reports_of_many_hosts_at_once(db, tmp_path):
    """Agents starting together: their rows are disjoint, so every report applies."""
    hosts = [f"node-{i}" for i in range(8)]
    prepared = [Agent(h).report(fake_devices(h, 2, tmp_path)) for h in hosts]
    barrier, errors = threading.Barrier(len(hosts)), []

    def send(report: reports.InventoryReport) -> None:
        barrier.wait()
        try:
            inventory.apply_report(db, report)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(f"{report.host}: {type(exc).__name__}: {str(exc)[:200]}")

    threads = [threading.Thread(target=send, args=(r,)) for r in prepared]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert counts(db)["devices"] == 16
    assert sorted(s["host"] for s in rows(db, "services")) == hosts
    assert sorted(d["host"] for d in rows(db, "driver_states")) == hosts


def test_a_report_that_only_renames_the_provider_is_a_change(db, four):
    """The compute node's provider name is what the conductor finds in Placement: a
    report that changes only that must count as changed (the host is synced again)."""
    agent, devs = four
    renamed = dataclasses.replace(agent.report(devs), provider_name="node1.example.org")
    result = inventory.apply_report(db, renamed)
    assert (result.changed, result.stale, result.changed_devices) == (True, False, ())
    assert [s["provider_name"] for s in rows(db, "services")] == ["node1.example.org"]
    again = dataclasses.replace(renamed, seq=renamed.seq + 1)
    assert inventory.apply_report(db, again).changed is False

"""How many writes an inventory report costs, counted at the DBAPI cursor on each backend.

An agent sends a full report every period; in the steady state nothing changed, and the
conductor must not write (no row churn, no lock traffic, no replication load). Two layers
guarantee it: the content digest short-circuits an identical report before any diff, and
the diff itself yields an empty plan when the rows already match, so even with the digest
forgotten no inventory row is written. A changed report must write, which also proves the
counter sees the statements.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import pytest
from sqlalchemy import event, text

from acceld import reports, states
from acceld.agent.drivers.base import DriverContext
from acceld.agent.drivers.fake import FakeDriver
from acceld.db import models as m
from acceld.db.api import Database
from acceld.objects import inventory
from tests.helpers import make_conf

HOST = "node1"
_WRITE = re.compile(r"^\s*(INSERT(?:\s+IGNORE)?\s+INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)"
                    r"\s+[`\"]?(\w+)", re.IGNORECASE)
_ANY_WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|MERGE|UPSERT)\b", re.IGNORECASE)


class StatementCounter:
    """Records every statement sent to ``target`` while active: an engine, or a
    Database (all of its engines, the autocommit one of Database.autocommit included)."""

    def __init__(self, target) -> None:
        self.engines = target.engines if isinstance(target, Database) else [target]
        self.statements: list[str] = []

    def _on_execute(self, conn, cursor, statement, parameters, context, executemany):
        self.statements.append(statement)

    def __enter__(self) -> StatementCounter:
        for engine in self.engines:
            event.listen(engine, "before_cursor_execute", self._on_execute)
        return self

    def __exit__(self, *exc) -> None:
        for engine in self.engines:
            event.remove(engine, "before_cursor_execute", self._on_execute)

    def writes(self) -> Counter:
        """(verb, table) -> count for INSERT/UPDATE/DELETE statements."""
        out: Counter = Counter()
        for stmt in self.statements:
            match = _WRITE.match(stmt)
            if match:
                out[(match.group(1).split()[0].upper(), match.group(2).lower())] += 1
        return out

    def inventory_writes(self) -> Counter:
        return Counter({k: v for k, v in self.writes().items()
                        if k[1] in m.INVENTORY_TABLES})

    def any_writes(self) -> list[str]:
        return [s for s in self.statements if _ANY_WRITE.match(s)]

    def touching(self, table: str) -> int:
        return sum(1 for s in self.statements if re.search(rf"\b{table}\b", s))


def fake_report(seq: int, count: int = 6, tmp_path=None,
                devices: tuple[reports.Device, ...] | None = None) -> reports.InventoryReport:
    if devices is None:
        conf = make_conf(fake_driver={"device_count": count})
        devices = tuple(FakeDriver(DriverContext(conf, HOST, str(tmp_path))).discover())
    return reports.InventoryReport(host=HOST, epoch="epoch-1", seq=seq, drivers=(
        reports.DriverReport(name="fake", version="1.0.0", devices=devices),))


def clear_digest(db: Database) -> None:
    with db.writer() as s:
        s.execute(text("UPDATE services SET report_digest = NULL"))


@pytest.fixture
def applied(db, tmp_path) -> reports.InventoryReport:
    """The database after a first report of 6 devices; returns that report."""
    first = fake_report(1, tmp_path=tmp_path)
    assert inventory.apply_report(db, first).changed
    return first


def test_counter_sees_the_writes_of_a_first_report(db, tmp_path):
    with StatementCounter(db) as counter:
        inventory.apply_report(db, fake_report(1, tmp_path=tmp_path))
    writes = counter.inventory_writes()
    for table in ("devices", "controlpath_ids", "deployables", "attributes",
                  "attach_handles", "driver_states"):
        assert writes[("INSERT", table)] >= 1, (table, writes)
    assert counter.writes()[("INSERT", "services")] == 1


def test_a_first_report_reads_its_new_deployables_once(db, tmp_path):
    """The attributes and handles of deployables a report adds take the deployables' ids
    and uuids from the one read after their INSERT, not from reads of their own."""
    with StatementCounter(db) as counter:
        inventory.apply_report(db, fake_report(1, tmp_path=tmp_path))
    inserted = next(i for i, stmt in enumerate(counter.statements)
                    if _WRITE.match(stmt) and "deployables" in stmt.split("(")[0].lower())
    reads = [stmt for stmt in counter.statements[inserted:]
             if stmt.lstrip().upper().startswith("SELECT")
             and re.search(r"\bFROM\s+[`\"]?deployables\b", stmt, re.IGNORECASE)]
    assert len(reads) == 1, reads


def test_unchanged_report_writes_nothing_at_all(db, applied):
    again = dataclasses.replace(applied, seq=2)
    with StatementCounter(db) as counter:
        result = inventory.apply_report(db, again)
    assert result == inventory.ApplyResult(changed=False)
    assert counter.touching("services") >= 1           # the listener is live
    assert counter.inventory_writes() == Counter()
    assert counter.any_writes() == []
    # The digest short-circuit runs before the diff: no inventory table is even read.
    assert counter.touching("attach_handles") == 0


def test_diff_path_is_write_free_when_nothing_changed(db, applied):
    clear_digest(db)
    again = dataclasses.replace(applied, seq=2)
    with StatementCounter(db) as counter:
        result = inventory.apply_report(db, again)
    assert result == inventory.ApplyResult(changed=False)
    assert counter.touching("attach_handles") >= 1     # the full diff did run
    assert counter.touching("attributes") >= 1
    assert counter.inventory_writes() == Counter()
    assert set(counter.writes()) <= {("UPDATE", "services")}   # bookmark + digest only
    with db.reader() as s:
        digest, seq = s.execute(text("SELECT report_digest, report_seq FROM services")).one()
    assert (digest, seq) == (applied.content_digest(), 2)
    # The next identical report takes the short-circuit again.
    with StatementCounter(db) as counter:
        inventory.apply_report(db, dataclasses.replace(applied, seq=3))
    assert counter.any_writes() == []


def test_changed_report_writes_only_what_changed(db, applied):
    (drv,) = applied.drivers
    gpu = drv.devices[0]
    (dep,) = gpu.deployables
    attrs = tuple((k, "CUSTOM_CHANGED" if k == "rc" else v) for k, v in dep.attributes)
    gpu2 = dataclasses.replace(gpu, deployables=(dataclasses.replace(dep, attributes=attrs),))
    changed = fake_report(2, devices=(gpu2, *drv.devices[1:]))
    with StatementCounter(db) as counter:
        result = inventory.apply_report(db, changed)
    assert result.changed
    assert counter.inventory_writes() == Counter({("UPDATE", "attributes"): 1})
    assert counter.writes()[("UPDATE", "services")] == 1


def test_changed_report_after_cleared_digest_still_writes(db, applied, tmp_path):
    clear_digest(db)
    fewer = fake_report(2, count=5, tmp_path=tmp_path)          # the 6th device is gone
    with StatementCounter(db) as counter:
        result = inventory.apply_report(db, fewer)
    assert result.changed
    writes = counter.inventory_writes()
    assert writes[("DELETE", "devices")] == 1
    assert writes[("DELETE", "controlpath_ids")] == 1
    assert writes[("UPDATE", "driver_states")] == 1
    assert not any(verb == "INSERT" for verb, _t in writes)


def test_unchanged_report_with_failed_driver_writes_nothing(db, applied):
    failed = reports.InventoryReport(host=HOST, epoch="epoch-1", seq=2, drivers=(
        reports.DriverReport(name="fake", version="1.0.0", state=states.DRIVER_FAILED,
                             error="boom"),))
    assert inventory.apply_report(db, failed).changed
    clear_digest(db)
    with StatementCounter(db) as counter:
        result = inventory.apply_report(db, dataclasses.replace(failed, seq=3))
    assert not result.changed
    assert counter.inventory_writes() == Counter()


def test_a_report_reads_its_added_devices_only_for_notifications(db, tmp_path):
    """``discovered``/``removed`` (the notifications' devices) cost a read each; with
    notifications off (``describe=False``) a report adding devices makes one statement on
    devices fewer (that read), and says nothing of them."""
    def device_reads(report: reports.InventoryReport,
                     describe: bool) -> tuple[int, inventory.ApplyResult]:
        with StatementCounter(db) as counter:
            result = inventory.apply_report(db, report, describe=describe)
        return counter.touching("devices"), result

    quiet, without = device_reads(fake_report(1, tmp_path=tmp_path), False)
    assert without.changed and without.discovered == ()
    assert device_reads(fake_report(2, devices=()), False)[1].removed == ()   # all gone
    described, with_devices = device_reads(fake_report(3, tmp_path=tmp_path), True)
    assert len(with_devices.discovered) == 6
    assert quiet == described - 1

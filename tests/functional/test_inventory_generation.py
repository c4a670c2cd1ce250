"""The inventory generation and the API's cached lists, on every database backend.

A cached list is only correct if every write to the tables it shows bumps the
generation in the writing transaction, and nothing else does (a bump on every bind would
make the cache useless). These tests write through each path that changes what
``GET /v2/devices`` or ``GET /v2/deployables`` shows, with the cache warm, and compare
the API's answer with a fresh query.
"""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
import webob
from sqlalchemy import text

from acceld.api import listcache
from acceld.db import api, generations
from acceld.db.api import Database
from acceld.objects import inventory
from acceld.objects import v2_inventory as v2
from tests import helpers
from tests.conftest import BACKENDS
from tests.functional.test_statement_count import HOST, fake_report
from tests.stack import Stack


def gen(db) -> int | None:
    """The counter in the database now (not the API's reader, which may answer a read it
    made less than FRESH_FOR ago)."""
    with db.reader() as s:
        return s.execute(text("SELECT value FROM generations WHERE name = :n"),
                         {"n": generations.INVENTORY}).scalar()


# -- the counter --------------------------------------------------------------------------

def test_a_report_bumps_once_and_an_unchanged_one_not_at_all(db, tmp_path):
    start = gen(db)
    first = fake_report(1, tmp_path=tmp_path)
    assert inventory.apply_report(db, first).changed
    assert gen(db) == start + 1          # many statements, one transaction: one bump
    inventory.apply_report(db, dataclasses.replace(first, seq=2))
    assert gen(db) == start + 1


def test_writes_to_other_tables_and_rolled_back_writes_do_not_bump(db, tmp_path):
    inventory.apply_report(db, fake_report(1, tmp_path=tmp_path))
    start = gen(db)
    with db.writer() as s:   # what a bind or an unbind writes
        s.execute(text("UPDATE attach_handles SET in_use = :t"), {"t": True})
        s.execute(text("UPDATE services SET report_digest = NULL"))
    assert gen(db) == start
    with pytest.raises(RuntimeError), db.writer() as s:
        s.execute(text("UPDATE devices SET vendor = 'x'"))
        raise RuntimeError("roll back")
    assert gen(db) == start
    with db.writer() as s:
        s.execute(text("UPDATE devices SET vendor = vendor"))
    assert gen(db) == start + 1


def test_status_and_attribute_writes_bump(db, tmp_path):
    inventory.apply_report(db, fake_report(1, tmp_path=tmp_path))
    device = next(iter(v2.list_devices(db)))["uuid"]
    with db.reader() as s:
        dep_id = s.execute(text("SELECT min(id) FROM deployables")).scalar()
    start = gen(db)
    v2.set_device_status(db, device, "maintaining")
    assert gen(db) == start + 1
    attr = v2.create_attribute(db, dep_id, "k", "v")
    assert gen(db) == start + 2
    v2.delete_attribute(db, attr["uuid"])
    assert gen(db) == start + 3


def test_views_written_recognises_each_write_form():
    inv = (generations.INVENTORY,)
    assert generations.views_written("UPDATE devices SET x=1") == inv
    assert generations.views_written('UPDATE "deployables" SET x=1') == inv
    assert generations.views_written("INSERT INTO attributes (a) VALUES (1)") == inv
    assert generations.views_written("INSERT IGNORE INTO `devices` (a) VALUES (1)") == inv
    assert generations.views_written("insert or replace into devices values (1)") == inv
    assert generations.views_written("DELETE FROM deployables WHERE id = 1") == inv
    assert generations.views_written("SELECT * FROM devices") == ()
    assert generations.views_written("UPDATE attach_handles SET in_use = 1") == ()
    assert generations.views_written("INSERT INTO devices_old VALUES (1)") == ()


def test_a_schema_without_the_row_reads_none_and_is_never_cached(db):
    with db.writer() as s:
        s.execute(text("DELETE FROM generations"))
    assert db.generation(generations.INVENTORY) is None
    assert db.generation(generations.INVENTORY) is None     # and None is not kept
    cache = listcache.ListCache()
    cache.put("k", None, b"x")
    assert cache.get("k", None) is None


def test_the_cache_keeps_the_newest_generation_only():
    cache = listcache.ListCache()
    cache.put("k", 5, b"five")
    assert cache.get("k", 5) == b"five"
    cache.put("k", 6, b"six")
    assert cache.get("k", 5) is None
    assert cache.get("k", 6) == b"six"
    # a slow reader that read generation 5 before the write must not put 5 back
    cache.put("k", 5, b"late five")
    assert cache.get("k", 6) == b"six"


def test_the_cache_keeps_no_long_body():
    cache = listcache.ListCache()
    cache.put("k", 5, b"x" * (listcache.MAX_BODY + 1))
    assert cache.get("k", 5) is None


# -- how long a read is good for -----------------------------------------------------------

class FakeClock:
    """The readers' clock, and the writers' sleep moving it on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _move_counter_behind_the_readers_back(db) -> None:
    """The counter moves with no bump hook (so no wait): what a reader then answers shows
    whether it went to the database."""
    with db.engine.connect() as c:
        c.execute(text("UPDATE generations SET value = value + 1 WHERE name = :n"),
                  {"n": generations.INVENTORY})
        c.commit()


def test_a_read_is_answered_again_only_within_keep_for_of_its_sending(db, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(generations, "_clock", clock)
    first = db.generation(generations.INVENTORY)
    _move_counter_behind_the_readers_back(db)
    clock.now += generations.KEEP_FOR * 0.9
    assert db.generation(generations.INVENTORY) == first          # kept: no round trip
    clock.now += generations.KEEP_FOR * 0.1
    assert db.generation(generations.INVENTORY) == first + 1      # over: read again


def test_a_commit_that_bumps_returns_fresh_for_after_the_database_has_it(db, monkeypatch):
    waits = []
    # what another connection sees while the writer waits: the commit is done already
    monkeypatch.setattr(generations, "_sleep", lambda s: waits.append((s, gen(db))))
    start = gen(db)
    with db.writer() as s:
        s.execute(text("UPDATE devices SET vendor = vendor"))
    assert waits == [(generations.FRESH_FOR, start + 1)]
    with db.write_rows() as c:                              # no bump, no wait
        c.execute(text("UPDATE attach_handles SET in_use = in_use"))
    with pytest.raises(RuntimeError), db.writer() as s:     # rolled back: no wait
        s.execute(text("UPDATE devices SET vendor = vendor"))
        raise RuntimeError("roll back")
    with db.write_rows() as c:
        c.execute(text("UPDATE attach_handles SET in_use = in_use"))
    assert waits == [(generations.FRESH_FOR, start + 1)]


def test_a_write_finished_by_another_process_is_in_the_next_read(db, monkeypatch, tmp_path):
    """Two processes (two Database objects on one database): the reader's last read is
    still fresh when the other's write starts, yet the read after that write returned
    shows it, because the write returned only FRESH_FOR after its commit. Without that
    wait (the control) the reader answers from before the write."""
    inventory.apply_report(db, fake_report(1, tmp_path=tmp_path))
    device = next(iter(v2.list_devices(db)))["uuid"]
    clock = FakeClock()
    monkeypatch.setattr(generations, "_clock", clock)
    monkeypatch.setattr(generations, "_sleep", clock.sleep)
    other = Database(db.url)
    try:
        before = db.generation(generations.INVENTORY)
        v2.set_device_status(other, device, "maintaining")
        assert db.generation(generations.INVENTORY) == before + 1

        monkeypatch.setattr(generations, "_sleep", lambda s: None)     # the control
        before = db.generation(generations.INVENTORY)
        v2.set_device_status(other, device, "enabled")
        assert db.generation(generations.INVENTORY) == before          # an old answer
    finally:
        other.dispose()


# -- through the API, cache warm ----------------------------------------------------------

@pytest.fixture
def stack(db):
    with Stack.reported(db, hosts=(HOST,), device_count=3) as s:
        yield s


def _get(stack, path, version="2.3"):
    req = webob.Request.blank(path, headers={"OpenStack-API-Version": f"accelerator {version}"})
    resp = req.get_response(stack.app)
    assert resp.status_int == 200, resp.text
    return resp.json


def _set_count(stack, count: int) -> None:
    with open(stack.control_file, "w", encoding="utf-8") as f:
        json.dump({"device_count": count}, f)
    stack.report_all()


def _fresh_devices(db) -> list[str]:
    return sorted(d["uuid"] for d in v2.list_devices(db))


def test_cached_lists_follow_every_inventory_write(stack, db):
    def api_devices():
        return sorted(d["uuid"] for d in _get(stack, "/v2/devices")["devices"])

    assert api_devices() == _fresh_devices(db) and len(api_devices()) == 3
    device = api_devices()[0]
    assert _get(stack, f"/v2/devices?hostname={HOST}")["devices"]

    # an agent's report that adds devices
    _set_count(stack, 5)
    assert api_devices() == _fresh_devices(db) and len(api_devices()) == 5

    # an operator's disable, seen at 2.3 and absent below it
    assert webob.Request.blank(f"/v2/devices/{device}/disable", method="POST").get_response(
        stack.app).status_int == 200
    status = {d["uuid"]: d["status"] for d in _get(stack, "/v2/devices")["devices"]}
    assert status[device] == "maintaining"
    assert "status" not in _get(stack, "/v2/devices", "2.0")["devices"][0]

    # an attribute added and removed shows in the deployables' attributes_list
    deps = _get(stack, "/v2/deployables")["deployables"]
    with db.reader() as s:
        dep_id = s.execute(text("SELECT id FROM deployables WHERE uuid = :u"),
                           {"u": deps[0]["uuid"]}).scalar()
    attr = v2.create_attribute(db, dep_id, "colour", "blue")
    listed = {d["uuid"]: d for d in _get(stack, "/v2/deployables")["deployables"]}
    assert {"colour": "blue"} in json.loads(listed[deps[0]["uuid"]]["attributes_list"])
    v2.delete_attribute(db, attr["uuid"])
    listed = {d["uuid"]: d for d in _get(stack, "/v2/deployables")["deployables"]}
    assert listed[deps[0]["uuid"]] == deps[0]

    # devices going away
    _set_count(stack, 2)
    assert api_devices() == _fresh_devices(db) and len(api_devices()) == 2


def test_links_follow_the_host_the_client_used(stack):
    def self_link(host):
        req = webob.Request.blank("/v2/devices", headers={"Host": host})
        return req.get_response(stack.app).json["devices"][0]["links"][0]["href"]

    assert self_link("a.example:6666").startswith("http://a.example:6666/accelerator/")
    assert self_link("b.example:6666").startswith("http://b.example:6666/accelerator/")


def test_readers_racing_writers_never_see_an_old_list(stack, db):
    """Readers loop while a writer flips a device's status. A read during which no write
    started must show the status the last finished write committed."""
    device = _fresh_devices(db)[0]
    stop, problems, checked = threading.Event(), [], []
    state = {"version": 0, "status": "enabled"}   # status None: a write is under way

    def reader():
        while not stop.is_set():
            version, expected = state["version"], state["status"]
            seen = {d["uuid"]: d["status"] for d in _get(stack, "/v2/devices")["devices"]}
            if expected is not None and state["version"] == version:
                checked.append(1)
                if seen[device] != expected:
                    problems.append((expected, seen[device]))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(20):
            status = ("maintaining", "enabled")[i % 2]
            state.update(version=state["version"] + 1, status=None)
            v2.set_device_status(db, device, status)
            state.update(version=state["version"] + 1, status=status)
            stop.wait(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert problems == []
    assert checked                              # the check did run


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] != "sqlite"])
def test_a_reader_connection_that_died_is_replaced_within_the_read(db, monkeypatch):
    """The generation reader's pooled connection, used a moment ago (so not pinged),
    has been dropped by the server (a restart, a failover, a killed session): the read
    is tried once more on a new connection instead of failing the API request. (SQLite
    has no server side to drop one.)"""
    clock = FakeClock()
    monkeypatch.setattr(generations, "_clock", clock)
    monkeypatch.setattr(api, "PING_AFTER_IDLE", 3600.0)     # no ping: the retry decides
    before = db.generation(generations.INVENTORY)
    with db.autocommit(write=False) as conn:      # the pool's one connection: the reader's
        dead = helpers.server_id(conn)
    with helpers.outside_connection(db) as admin:
        if db.dialect == "mysql":
            admin.execute(text(f"KILL {dead}"))
        else:
            admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
            admin.commit()
    clock.now += generations.KEEP_FOR           # the next read must reach the database
    assert db.generation(generations.INVENTORY) == before
    with db.autocommit(write=False) as conn:
        assert helpers.server_id(conn) != dead

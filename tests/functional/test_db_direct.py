"""``Database.write_one``: one-statement writes on DBAPI connections of their own
(``acceld.db.direct``), with what the pool did done there: a dead connection found by the
idle ping or by the failed statement, a fork, connections shared between threads and at
most ``max_idle`` kept; values stored as SQLAlchemy stores them; database errors raised as
oslo.db's, through SQLAlchemy; statements that need SQLAlchemy at execution never sent
directly.
"""

from __future__ import annotations

import datetime
import os
import threading
import uuid as uuidlib

import pytest
from oslo_db import exception as db_exc
from sqlalchemy import bindparam, delete, select, text

from acceld import exception
from acceld.db.api import Database
from acceld.db.models import AttachHandle, DeviceProfile, ExtendedAcceleratorRequest, utcnow
from acceld.objects import arqs, device_profiles
from tests import helpers
from tests.conftest import BACKENDS

# the tests that need a database server (sessions to kill or count) run on those alone
servers = pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] != "sqlite"])

_DP = DeviceProfile.__table__
_GROUPS = [{"resources:FPGA": "1"}]


def _server_id(dbapi_connection, dialect: str) -> int:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SELECT CONNECTION_ID()" if dialect == "mysql"
                       else "SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])
    finally:
        cursor.close()


def _session_id(db: Database) -> int:
    """The server's id of the connection the next write takes (the last one used); on
    SQLite the connection's own identity."""
    with db.direct.connection() as conn:
        return id(conn) if db.dialect == "sqlite" else _server_id(conn, db.dialect)


def _sessions(db: Database) -> set[int]:
    with helpers.outside_connection(db) as conn:
        if db.dialect == "mysql":
            return {int(r[0]) for r in conn.exec_driver_sql(
                "SELECT id FROM information_schema.processlist")}
        return {int(r[0]) for r in conn.exec_driver_sql("SELECT pid FROM pg_stat_activity")}


def _kill(db: Database, session: int) -> None:
    with helpers.outside_connection(db) as conn:
        if db.dialect == "mysql":
            conn.exec_driver_sql(f"KILL {session}")
        else:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": session})
            conn.commit()


@pytest.fixture
def sent(db: Database) -> list[str]:
    """The statements write_one sent directly."""
    seen: list[str] = []
    db.direct.listeners.append(seen.append)
    yield seen
    db.direct.listeners.remove(seen.append)


def _count(db: Database, name: str) -> int:
    with helpers.outside_connection(db) as conn:
        return int(conn.execute(text("SELECT count(*) FROM device_profiles WHERE name = :n"),
                                {"n": name}).scalar())


def test_writes_go_direct_commit_by_themselves_and_errors_come_as_oslo_db_ones(
        db: Database, sent: list[str]) -> None:
    made = device_profiles.create(db, "d1", _GROUPS)
    assert _count(db, "d1") == 1                        # committed: another session sees it
    assert [s.split()[0] for s in sent] == ["INSERT"]
    assert device_profiles.get(db, uuid=made["uuid"]) == made
    # the values are stored as SQLAlchemy stores them (SQLite: its datetime text): the
    # same row through SQLAlchemy's path, compared as the columns hold them
    row = dict(uuid=str(uuidlib.uuid4()), name="d1-sa", description=None, profile_json="{}",
               created_at=utcnow().replace(microsecond=0), updated_at=None)
    db.write_one(device_profiles._INSERT, dict(row, uuid=str(uuidlib.uuid4()), name="d1-d"))
    with db.autocommit(write=True) as conn:
        conn.execute(device_profiles._INSERT, row)
    with helpers.outside_connection(db) as conn:
        stored = dict(conn.exec_driver_sql(
            "SELECT name, created_at FROM device_profiles WHERE name IN ('d1-d', 'd1-sa')"
        ).all())
    assert stored["d1-d"] == stored["d1-sa"]
    # a duplicate: the server refused it; SQLAlchemy runs it again and oslo.db names it
    with pytest.raises(exception.Conflict, match="name d1"):
        device_profiles.create(db, "d1", _GROUPS)
    with pytest.raises(db_exc.DBDuplicateEntry) as info:
        db.write_one(device_profiles._INSERT, dict(
            uuid=made["uuid"], name="other", description=None, profile_json="{}",
            created_at=utcnow().replace(microsecond=0), updated_at=None))
    assert "uuid" in (info.value.columns or [])
    # a profile in use: the foreign key's error, worded by the objects layer
    arq = arqs.create(db, "d1", None)[0]
    with pytest.raises(exception.Conflict, match="used by 1 accelerator"):
        device_profiles.delete_by_uuid(db, made["uuid"])
    arqs.delete_by_uuids(db, [arq["uuid"]], project_id=None, service=True)
    session = _session_id(db)
    sent.clear()
    device_profiles.delete_by_uuid(db, made["uuid"])   # the connection survived the errors
    assert [s.split()[0] for s in sent] == ["DELETE"]
    assert _session_id(db) == session
    assert _count(db, "d1") == 0
    with pytest.raises(exception.NotFound):             # rowcount 0
        device_profiles.delete_by_uuid(db, made["uuid"])


@servers
def test_a_dead_connection_fails_one_write_and_the_next_reconnects(
        db: Database, sent: list[str]) -> None:
    device_profiles.create(db, "k1", _GROUPS)
    dead = _session_id(db)
    _kill(db, dead)
    db.direct.ping_after_idle = 3600.0                  # used a moment ago: no ping
    with pytest.raises(db_exc.DBConnectionError):
        device_profiles.create(db, "k2", _GROUPS)
    device_profiles.create(db, "k2", _GROUPS)           # a new connection
    assert _session_id(db) != dead
    assert _count(db, "k2") == 1


@servers
def test_an_idle_connection_is_pinged_and_replaced_when_dead(db: Database) -> None:
    device_profiles.create(db, "i1", _GROUPS)
    dead = _session_id(db)
    _kill(db, dead)
    db.direct.ping_after_idle = 0.0                     # every connection counts as idle
    device_profiles.create(db, "i2", _GROUPS)           # the write never saw the dead one
    assert _session_id(db) != dead
    assert _count(db, "i2") == 1


@servers
def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents(
        db: Database) -> None:
    device_profiles.create(db, "f1", _GROUPS)
    parent = _session_id(db)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                        # the child: report, never return
        status = 1
        try:
            os.close(read)
            device_profiles.create(db, "f2", _GROUPS)
            os.write(write, str(_session_id(db)).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    child = int(os.read(read, 64) or b"0")
    os.close(read)
    assert os.waitpid(pid, 0)[1] == 0
    assert child not in (0, parent)
    device_profiles.create(db, "f3", _GROUPS)           # the parent's connection still works
    assert _session_id(db) == parent
    assert _count(db, "f2") == 1 and _count(db, "f3") == 1


@servers
def test_threads_share_the_connections_and_at_most_max_idle_are_kept(
        db: Database) -> None:
    device_profiles.create(db, "s0", _GROUPS)
    first = _session_id(db)
    ids: list[int] = []

    def work(n: int) -> None:
        device_profiles.create(db, f"s{n}", _GROUPS)
        ids.append(_session_id(db))

    for n in range(1, 4):               # a thread per request, as a threading server does
        t = threading.Thread(target=work, args=(n,))
        t.start()
        t.join()
    assert ids == [first] * 3           # no connection per thread
    assert db.direct.idle() == 1
    # three in use at once: all three come back, and only max_idle of them stay open
    db.direct.max_idle = 2
    with db.direct.connection() as a, db.direct.connection() as b, \
            db.direct.connection() as c:
        held = {_server_id(conn, db.dialect) for conn in (a, b, c)}
    assert len(held) == 3 and first in held
    assert db.direct.idle() == 2
    open_now = _sessions(db)
    assert len(held & open_now) == 2    # the third was closed on the server too
    device_profiles.create(db, "s4", _GROUPS)
    assert _count(db, "s4") == 1


def test_statements_that_need_sqlalchemy_are_not_sent_directly(
        db: Database, sent: list[str]) -> None:
    made = [device_profiles.create(db, f"e{n}", _GROUPS)["uuid"] for n in range(2)]
    sent.clear()
    # a value rendered into the SQL at each execution: SQLAlchemy's path, same result
    rendered = delete(_DP).where(_DP.c.uuid == bindparam("u", literal_execute=True))
    assert db.write_one(rendered, {"u": made[0]}) == 1
    assert sent == []
    # a generation's tables: refused, as on the autocommit pool
    with pytest.raises(RuntimeError, match="needs a transaction"):
        db.write_one(text("UPDATE devices SET vendor = vendor"), {})


def test_reads_go_direct_with_values_as_sqlalchemy_gives_them(
        db: Database, sent: list[str]) -> None:
    """Database.read: one SELECT on the direct path, each value as SQLAlchemy's result
    has it (a MySQL boolean is 0/1 on the wire, a SQLite datetime is text); a statement
    that needs SQLAlchemy at execution goes through it, with the same rows."""
    rp_uuid, profile = helpers.make_qat_inventory(db, handles=2)
    arq = arqs.create(db, profile, None)[0]
    handles = select(AttachHandle.__table__.c.id, AttachHandle.__table__.c.in_use,
                     AttachHandle.__table__.c.created_at) \
        .order_by(AttachHandle.__table__.c.id)
    sent.clear()
    rows = db.read(handles, {})
    assert [s.split()[0] for s in sent] == ["SELECT"]
    with db.autocommit(write=False) as conn:
        expected = [dict(r) for r in conn.execute(handles).mappings()]
    assert rows == expected and len(rows) == 2
    assert rows[0]["in_use"] is False and rows[0].in_use is False      # keys and attributes
    assert isinstance(rows[0].created_at, datetime.datetime)
    with pytest.raises(AttributeError):
        rows[0].no_such_column  # noqa: B018
    # an ARQ as the API shows it, read directly
    assert arqs.get(db, arq["uuid"], project_id=None) == arq
    # an IN list expanded at each execution: a plan per length, the same rows
    sent.clear()
    expanding = handles.where(AttachHandle.__table__.c.id.in_(
        bindparam("ids", expanding=True)))
    assert db.read(expanding, {"ids": [r["id"] for r in rows]}) == expected
    assert len(sent) == 1
    # two columns of one name: SQLAlchemy tells them apart, so it reads them
    sent.clear()
    arq_table, dp_table = ExtendedAcceleratorRequest.__table__, DeviceProfile.__table__
    same_name = select(arq_table.c.uuid, dp_table.c.uuid).join_from(arq_table, dp_table)
    assert [tuple(r.values()) for r in db.read(same_name, {})] == \
        [(arq["uuid"], device_profiles.get(db, name=profile)["uuid"])]
    assert sent == []


def test_a_plan_binds_the_values_construct_params_would(db: Database, sent: list[str]) -> None:
    """The bind values a plan works out once are those of SQLAlchemy's construct_params()
    for the same parameters: values from the call, a bind's own value (a literal in the
    statement), a bind named twice; one whose value is computed per call keeps
    construct_params(), and each runs with the right rows."""
    made = {n: device_profiles.create(db, n, _GROUPS) for n in ("b1", "b2", "b3")}
    direct = db.direct
    by_name_and_literal = select(_DP.c.uuid).where(_DP.c.name == bindparam("n"),
                                                   _DP.c.description.is_(None),
                                                   _DP.c.id > 0)
    twice = select(_DP.c.uuid).where((_DP.c.name == bindparam("n")) |
                                     (_DP.c.uuid == bindparam("n")))
    computed = select(_DP.c.uuid).where(_DP.c.name == bindparam("c", callable_=lambda: "b3"))
    given = select(_DP.c.uuid).where(_DP.c.name == bindparam("g"),
                                     _DP.c.uuid != bindparam("u")).params(g="b1", u="x")
    cases = [(by_name_and_literal, {"n": "b1"}, "b1"), (twice, {"n": "b2"}, "b2"),
             (computed, {}, "b3"), (given, {}, "b1"), (given, {"g": "b3"}, "b3")]
    for stmt, params, name in cases:
        plan = direct.plan(stmt, tuple(sorted(params)))
        assert plan is not None
        expected = plan.compiled.construct_params(params)
        for bind_name, process in plan.processors:
            expected[bind_name] = process(expected[bind_name])
        assert plan.values(params) == expected
        sent.clear()
        assert [r.uuid for r in db.read(stmt, params)] == [made[name]["uuid"]]
        assert len(sent) == 1                       # it went direct
    assert direct.plan(by_name_and_literal, ("n",)).binds is not None
    assert direct.plan(given, ("g",)).binds is not None
    assert direct.plan(computed, ()).binds is None  # construct_params() per call
    # an INSERT's values from the call, processed for the dialect (SQLite's datetimes)
    insert_plan = direct.plan(device_profiles._INSERT, tuple(sorted(
        ("uuid", "name", "description", "profile_json", "created_at", "updated_at"))))
    row = {"uuid": str(uuidlib.uuid4()), "name": "b4", "description": None,
           "profile_json": "{}", "created_at": utcnow().replace(microsecond=0),
           "updated_at": None}
    expected = insert_plan.compiled.construct_params(row)
    for bind_name, process in insert_plan.processors:
        expected[bind_name] = process(expected[bind_name])
    assert insert_plan.values(row) == expected


def test_an_in_list_gets_a_plan_per_length_as_sqlalchemy_renders_it(
        db: Database, sent: list[str]) -> None:
    """An expanding IN list runs directly with the SQL SQLAlchemy renders for its length
    (empty too) and the same rows and row counts; a list longer than MAX_EXPANDED, or a
    typed list whose values a processor converts (SQLite's datetimes), likewise, the
    long one through SQLAlchemy."""
    from acceld.db import direct
    made = [device_profiles.create(db, f"i{n}", _GROUPS) for n in range(20)]
    uuids = [p["uuid"] for p in made]
    by_uuids = select(_DP.c.name).where(_DP.c.uuid.in_(bindparam("u", expanding=True)),
                                        _DP.c.id > bindparam("after")).order_by(_DP.c.id)
    by_dates = select(_DP.c.name).where(
        _DP.c.created_at.in_(bindparam("d", expanding=True))).order_by(_DP.c.id)
    for n in (0, 1, 2, 3, 1, direct.MAX_EXPANDED):
        sent.clear()
        rows = db.read(by_uuids, {"u": uuids[:n], "after": 0})
        assert [r.name for r in rows] == [f"i{k}" for k in range(n)]
        assert len(sent) == 1
        if n:
            assert sent[0].count(",") >= n - 1    # the list rendered for its length
    sent.clear()
    long = direct.MAX_EXPANDED + 2
    assert [r.name for r in db.read(by_uuids, {"u": uuids[:long], "after": 0})] == \
        [f"i{k}" for k in range(long)]
    assert sent == []
    dates = sorted({p["created_at"] for p in made})
    with db.autocommit(write=False) as conn:
        expected = [r.name for r in conn.execute(by_dates, {"d": dates[:2]})]
    sent.clear()
    assert [r.name for r in db.read(by_dates, {"d": dates[:2]})] == expected and expected
    assert len(sent) == 1
    sent.clear()
    gone = delete(_DP).where(_DP.c.uuid.in_(bindparam("u", expanding=True)))
    assert db.write_one(gone, {"u": uuids[:3]}) == 3
    assert db.write_one(gone, {"u": []}) == 0
    assert len(sent) == 2

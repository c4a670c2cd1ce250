"""One-statement writes (a device profile create or delete by uuid) through
``Database.autocommit``: each commits by itself; database errors come as oslo.db's and are
worded by the objects layer, and the connection survives them; on the server-backed
engines a dead connection is found by the idle ping or by the failed statement, a forked
child opens its own connection and leaves the parent's alone, and threads share the
pooled connections.
"""

from __future__ import annotations

import os
import threading

import pytest
from oslo_db import exception as db_exc
from sqlalchemy import text

from acceld import exception
from acceld.db import api
from acceld.db.api import Database
from acceld.objects import arqs, device_profiles
from tests import helpers
from tests.conftest import BACKENDS

# the tests that need a database server (sessions to kill) run on those alone
servers = pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] != "sqlite"])

_GROUPS = [{"resources:FPGA": "1"}]


def _session_id(db: Database) -> int:
    """The server's id of the connection the next one-statement write takes (the last
    one used)."""
    with db.autocommit(write=False) as conn:
        return helpers.server_id(conn)


def _kill(db: Database, session: int) -> None:
    with helpers.outside_connection(db) as conn:
        if db.dialect == "mysql":
            conn.exec_driver_sql(f"KILL {session}")
        else:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": session})
            conn.commit()


def _count(db: Database, name: str) -> int:
    with helpers.outside_connection(db) as conn:
        return int(conn.execute(text("SELECT count(*) FROM device_profiles WHERE name = :n"),
                                {"n": name}).scalar())


def test_writes_commit_by_themselves_and_errors_come_as_oslo_db_ones(db: Database) -> None:
    made = device_profiles.create(db, "d1", _GROUPS)
    assert _count(db, "d1") == 1                        # committed: another session sees it
    assert device_profiles.get(db, uuid=made["uuid"]) == made
    # a duplicate: oslo.db names the column, the objects layer words it
    with pytest.raises(exception.Conflict, match="name d1"):
        device_profiles.create(db, "d1", _GROUPS)
    with pytest.raises(exception.Conflict, match=f"uuid {made['uuid']}"):
        device_profiles.create(db, "other", _GROUPS, uuid=made["uuid"])
    # a profile in use: the foreign key's error, worded by the objects layer
    arq = arqs.create(db, "d1", None)[0]
    with pytest.raises(exception.Conflict, match="used by 1 accelerator"):
        device_profiles.delete_by_uuid(db, made["uuid"])
    arqs.delete_by_uuids(db, [arq["uuid"]], project_id=None, service=True)
    session = _session_id(db) if db.dialect != "sqlite" else None
    device_profiles.delete_by_uuid(db, made["uuid"])   # the connection survived the errors
    if session is not None:
        assert _session_id(db) == session
    assert _count(db, "d1") == 0
    with pytest.raises(exception.NotFound):             # rowcount 0
        device_profiles.delete_by_uuid(db, made["uuid"])


@servers
def test_a_dead_connection_fails_one_write_and_the_next_reconnects(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    device_profiles.create(db, "k1", _GROUPS)
    dead = _session_id(db)
    _kill(db, dead)
    monkeypatch.setattr(api, "PING_AFTER_IDLE", 3600.0)    # used a moment ago: no ping
    with pytest.raises(db_exc.DBConnectionError):
        device_profiles.create(db, "k2", _GROUPS)
    device_profiles.create(db, "k2", _GROUPS)           # a new connection
    assert _session_id(db) != dead
    assert _count(db, "k2") == 1


@servers
def test_an_idle_connection_is_pinged_and_replaced_when_dead(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    device_profiles.create(db, "i1", _GROUPS)
    dead = _session_id(db)
    _kill(db, dead)
    monkeypatch.setattr(api, "PING_AFTER_IDLE", 0.0)       # every connection counts as idle
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
def test_threads_share_the_connections(db: Database) -> None:
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
    assert _count(db, "s3") == 1

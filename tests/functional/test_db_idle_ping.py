"""A pooled connection is pinged before use only after it has sat idle
(acceld.db.api._check_connections_on_checkout), on the server-backed engines.

oslo.db's pre-ping would cost a round trip before every transaction. The tests count the
dialect's pings, and kill a pooled connection on the server (what a restart, a failover
or an idle timeout does) to show that an idle one is checked and replaced within the
checkout, and, as the control, that a dead connection handed out unpinged fails.
"""

from __future__ import annotations

from typing import Any

import pytest
from oslo_db import exception as db_exc
from sqlalchemy import text

from acceld.db import api
from acceld.db.api import Database
from tests import helpers
from tests.conftest import BACKENDS

pytestmark = pytest.mark.parametrize("backend",
                                     [b for b in BACKENDS if b.values[0] != "sqlite"])


def _kill(db: Database, server_id: int) -> None:
    """Ends that session from the server's side, on a connection outside the pool."""
    with helpers.outside_connection(db) as conn:
        if conn.dialect.name == "mysql":
            conn.exec_driver_sql(f"KILL {server_id}")
        else:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": server_id})
            conn.commit()


@pytest.fixture
def pings(db: Database, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The connections the pool pinged."""
    seen: list[Any] = []
    ping = db.engine.dialect.do_ping

    def counting(dbapi_connection: Any) -> bool:
        seen.append(dbapi_connection)
        return ping(dbapi_connection)

    monkeypatch.setattr(db.engine.dialect, "do_ping", counting)
    return seen


def _pooled_server_id(db: Database) -> int:
    with db.rows() as conn:
        return helpers.server_id(conn)


def test_a_connection_used_a_moment_ago_is_not_pinged(db: Database, pings: list[Any]) -> None:
    first = _pooled_server_id(db)
    for _ in range(3):
        with db.write_rows() as conn:
            conn.execute(text("SELECT 1"))
    assert _pooled_server_id(db) == first           # the same connection all along
    assert pings == []


def test_an_idle_connection_is_pinged_and_a_dead_one_replaced(
        db: Database, pings: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _pooled_server_id(db)
    _kill(db, dead)
    monkeypatch.setattr(api, "PING_AFTER_IDLE", 0.0)  # every pooled connection is idle now
    assert _pooled_server_id(db) != dead              # the transaction did not see it
    assert len(pings) >= 1


def test_without_the_ping_a_dead_connection_fails_its_transaction(
        db: Database, pings: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the same dead connection, handed out as one used a moment ago."""
    dead = _pooled_server_id(db)
    _kill(db, dead)
    monkeypatch.setattr(api, "PING_AFTER_IDLE", 3600.0)
    with pytest.raises(db_exc.DBConnectionError):
        _pooled_server_id(db)
    assert pings == []
    assert _pooled_server_id(db) != dead              # the pool recovers on the next use

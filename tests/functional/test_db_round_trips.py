"""MySQL: the pool's reset on return costs a ROLLBACK round trip only when a transaction
is open (acceld.db.api._rollback_only_open_transactions).

Counted on the server, per connection: ``Com_rollback`` (ROLLBACK statements this session
sent) and ``@@in_transaction``. Each test runs its steps one after another on a pool that
hands the same connection back each time.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Connection, text

from acceld.db.api import Database
from tests.conftest import BACKENDS

# the conftest's migrated ``db``, on MySQL only
pytestmark = pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] == "mysql"])


def _session(conn: Connection) -> tuple[int, int]:
    """(ROLLBACKs this connection has sent, whether it is inside a transaction)."""
    rollbacks = int(conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Com_rollback'").one()[1])
    return rollbacks, int(conn.exec_driver_sql("SELECT @@in_transaction").scalar())


def _probe(db: Database) -> tuple[int, int, int]:
    """(connection id, ROLLBACKs so far, in a transaction) of the next pooled connection.
    The probe itself reads, so its own return rolls back once."""
    with db.rows() as conn:
        cid = int(conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar())
        return (cid, *_session(conn))


_INSERT = text("INSERT INTO device_profiles (uuid, name, profile_json, created_at) "
               "VALUES (:u, :n, '{\"groups\": []}', NOW())")


def _count(db: Database, name: str) -> int:
    with db.rows() as conn:
        return conn.execute(text("SELECT COUNT(*) FROM device_profiles WHERE name = :n"),
                            {"n": name}).scalar()


def test_no_rollback_after_a_commit(db: Database) -> None:
    cid, before, _ = _probe(db)
    for i in range(3):
        with db.write_rows() as conn:
            conn.execute(_INSERT, {"u": f"00000000-0000-0000-0000-00000000000{i}",
                                   "n": f"dp{i}"})
    cid_after, after, in_tx = _probe(db)
    assert cid_after == cid                      # the same connection all along
    # one ROLLBACK: the first probe's return; the three committed writes sent none
    assert after - before == 1
    assert in_tx == 0


def test_a_connection_returned_mid_transaction_is_rolled_back(db: Database) -> None:
    """A raw DBAPI checkout: SQLAlchemy sees neither its statement nor its transaction,
    so only the pool's reset can end it."""
    cid, before, _ = _probe(db)
    with db.write_rows() as conn:             # the connection is clean now
        conn.execute(_INSERT, {"u": "00000000-0000-0000-0000-0000000000a0", "n": "done"})
    raw = db.engine.raw_connection()
    try:
        raw.cursor().execute(
            "INSERT INTO device_profiles (uuid, name, profile_json, created_at) VALUES "
            "('00000000-0000-0000-0000-0000000000aa', 'open', '{}', NOW())")
    finally:
        raw.close()                              # no commit: the pool must roll back
    cid_after, after, in_tx = _probe(db)
    assert cid_after == cid
    assert after - before == 2                   # the probe's and the abandoned insert's
    assert in_tx == 0
    assert _count(db, "open") == 0


def test_a_statement_after_a_commit_is_not_left_open(db: Database) -> None:
    """Commit, then more statements on the same checkout: returned dirty, rolled back."""
    with db.engine.connect() as conn:
        conn.execute(_INSERT, {"u": "00000000-0000-0000-0000-0000000000bb", "n": "kept"})
        conn.commit()
        conn.execute(_INSERT, {"u": "00000000-0000-0000-0000-0000000000cc", "n": "dropped"})
    _cid, _rollbacks, in_tx = _probe(db)
    assert in_tx == 0
    assert (_count(db, "kept"), _count(db, "dropped")) == (1, 0)


def test_a_failed_write_transaction_is_rolled_back(db: Database) -> None:
    with pytest.raises(RuntimeError), db.write_rows() as conn:
        conn.execute(_INSERT, {"u": "00000000-0000-0000-0000-0000000000dd", "n": "failed"})
        raise RuntimeError("boom")
    _cid, _rollbacks, in_tx = _probe(db)
    assert in_tx == 0
    assert _count(db, "failed") == 0

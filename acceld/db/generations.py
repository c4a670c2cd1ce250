"""Change counters that let the API serve inventory lists from memory, never stale.

A *generation* is one row of ``generations``. Every transaction that writes one of the
tables a view reads (``WATCHED``) bumps that view's row just before it commits, on the
same connection, so the bump and the writes become visible together. A reader first
reads the generation, then (on a cache miss) the rows: rows read after the generation
are at least as new as it, so a cache entry filed under a generation is never older than
the data that generation stands for, on any isolation level. Caches live in each API
process (``acceld.api.listcache``); the database row is what ties them together, across
processes and hosts.

Writes are recognised on the engine (every INSERT, UPDATE or DELETE statement names its
table first), not at each call site, so a new write path cannot forget to invalidate.

A generation read stays good for answers for ``KEEP_FOR`` seconds after it was sent,
and in exchange every commit that bumps a generation returns only ``FRESH_FOR`` after
the database acknowledged it. Any request that starts after such a write has returned
therefore either reads the generation again or reuses a read sent after the commit, which
saw the bump: no answer is older than a write its client saw finish. Only intervals are
compared, each on one host's clock (no clock needs to agree with another); the reader's
clock counts time spent suspended, and ``KEEP_FOR`` is a millisecond short of
``FRESH_FOR`` for clock rates that differ a little and for rounding. Inventory writes (a
changed report, a status, an attribute) are rare and wait 10 ms; the hot list reads, on
MariaDB or PostgreSQL, skip the round trip that was most of their latency.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import sqlalchemy
from sqlalchemy import event

INVENTORY = "inventory"

# view -> the tables its lists read
WATCHED: dict[str, tuple[str, ...]] = {
    INVENTORY: ("devices", "deployables", "attributes"),
}

_WRITE = re.compile(
    r"\s*(?:INSERT\s+(?:(?:OR\s+\w+|IGNORE)\s+)?INTO|REPLACE\s+INTO|UPDATE|DELETE\s+FROM)\s+"
    r"[`\"]?(\w+)", re.IGNORECASE)
_VIEWS_OF: dict[str, tuple[str, ...]] = {}
for _view, _tables in WATCHED.items():
    for _table in _tables:
        _VIEWS_OF[_table] = (*_VIEWS_OF.get(_table, ()), _view)

# Seconds a generation read stays good for answers, and so how long a commit that bumps a
# generation waits before it returns. Every acceld process must use the same value (a
# reader keeping a read longer than writers wait could answer from before a finished
# write), which is why it is a constant of the code and not an option.
FRESH_FOR = 0.010
# how long a reader keeps a read: a little less, for clock rates that differ a little
# between hosts and for rounding
KEEP_FOR = FRESH_FOR - 0.001

# the reader's clock: counts time suspended (CLOCK_BOOTTIME), which CLOCK_MONOTONIC, the
# one time.monotonic() reads on Linux, does not; a writer's sleep is at least as long on
# either
_clock = ((lambda: time.clock_gettime(time.CLOCK_BOOTTIME))
          if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic)
_sleep = time.sleep

_DIRTY = "acceld.dirty_views"
_SETTLE = threading.local()   # .due: this thread's commit bumped a generation
_BUMP = "UPDATE generations SET value = value + 1 WHERE name = '{}'"
_READ = "SELECT value FROM generations WHERE name = '{}'"


def views_written(statement: str) -> tuple[str, ...]:
    """The views whose tables ``statement`` writes (none for a read)."""
    if statement[:6].upper() in ("SELECT", "BEGIN", "SAVEPO", "RELEAS", "PRAGMA"):
        return ()
    match = _WRITE.match(statement)
    return _VIEWS_OF.get(match.group(1).lower(), ()) if match else ()


def refuse_outside_transaction(statement: str, where: str) -> None:
    """RuntimeError when ``statement`` writes a generation's tables: their bump rides on
    a transaction's commit, which ``where`` (a path without one) would skip."""
    if views_written(statement):
        raise RuntimeError(f"a write to a generation's tables needs a transaction "
                           f"(Database.write_rows), not {where}")


def install(engine: sqlalchemy.engine.Engine) -> None:
    """Bump the generations of the views a transaction wrote, at its commit."""

    @event.listens_for(engine, "before_cursor_execute")
    def _note(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
              executemany: bool) -> None:
        views = views_written(statement)
        if views:
            conn.info.setdefault(_DIRTY, set()).update(views)

    @event.listens_for(engine, "commit")
    def _bump(conn: Any) -> None:
        views = conn.info.pop(_DIRTY, None)
        if views:
            # The DBAPI cursor of the committing transaction: the bump commits with it.
            cursor = conn.connection.dbapi_connection.cursor()
            try:
                for view in sorted(views):   # one order everywhere: no lock cycles
                    cursor.execute(_BUMP.format(view))
            finally:
                cursor.close()
            _SETTLE.due = True      # the dialect's commit, next on this thread, waits

    @event.listens_for(engine, "rollback")
    def _forget(conn: Any) -> None:
        _SETTLE.due = False
        if not conn.invalidated:   # a lost connection's info raises; its record is reset
            conn.info.pop(_DIRTY, None)

    # The "commit" event runs before the DBAPI commit; the wait must follow it.
    dialect = engine.dialect
    commit = dialect.do_commit

    def do_commit(dbapi_connection: Any) -> None:
        try:
            commit(dbapi_connection)
        finally:
            due, _SETTLE.due = getattr(_SETTLE, "due", False), False
        if due:
            _sleep(FRESH_FOR)   # see FRESH_FOR: readers may still answer from before

    dialect.do_commit = do_commit  # type: ignore[method-assign]


class Reader:
    """Reads generations on a few connections kept out of the pool.

    The read is a primary-key lookup on every cached API request; a pool checkout and
    checkin (with its reset rollback) cost more than the lookup itself. Connections are
    detached from the pool (their connect-time set-up done) and kept on a free list, one
    per concurrent reader (threads come and go: the embedded server starts one per
    request). They run in autocommit, so each read is its own transaction (a fresh
    snapshot, one round trip, nothing left open); a connection that fails is closed, and
    a read that failed on a kept connection is tried once more on a new one. :meth:`close`
    closes the idle ones (the database's ``dispose``).

    A read is answered again, with no round trip, until ``KEEP_FOR`` (just under
    ``FRESH_FOR``) after it was sent (see the module's doc): under load, one read in many
    reaches the database.
    """

    MAX_IDLE = 16

    def __init__(self, engine: sqlalchemy.engine.Engine) -> None:
        self._engine = engine
        self._idle: list[Any] = []
        self._kept: dict[str, tuple[float, int]] = {}   # view -> (sent at, generation)
        self._kept_lock = threading.Lock()

    def _connection(self, reuse: bool = True) -> tuple[Any, bool]:
        """(connection, whether it was idle here before)."""
        if reuse:
            try:
                return self._idle.pop(), True    # atomic: no lock needed
            except IndexError:
                pass
        raw = self._engine.raw_connection()
        raw.detach()
        self._engine.dialect.set_isolation_level(raw.dbapi_connection, "AUTOCOMMIT")
        return raw, False

    def close(self) -> None:
        while self._idle:
            _close(self._idle.pop())

    def read(self, view: str) -> int | None:
        """The view's generation now; None where the row is missing (schema made
        without the migrations), which callers treat as "do not cache"."""
        sent = _clock()     # before the query goes out: the read is at least this new
        kept = self._kept.get(view)
        if kept is not None and sent - kept[0] < KEEP_FOR:
            return kept[1]
        raw, reused = self._connection()
        while True:
            try:
                cursor = raw.cursor()
                cursor.execute(_READ.format(view))
                row = cursor.fetchone()
                cursor.close()
                break
            except Exception:
                _close(raw)
                if not reused:
                    raise
                # An idle connection can have died with the server (a restart, a
                # failover) while it waited here; these skip the pool's pre-ping, so
                # the read is tried once more on a new connection before it fails.
                raw, reused = self._connection(reuse=False)
        if len(self._idle) < self.MAX_IDLE:
            self._idle.append(raw)
        else:
            _close(raw)
        if row is None:
            return None
        value = int(row[0])
        with self._kept_lock:   # a slower read sent earlier must not replace a newer one
            kept = self._kept.get(view)
            if kept is None or kept[0] < sent:
                self._kept[view] = (sent, value)
        return value


def _close(raw: Any) -> None:
    try:
        raw.close()
    except Exception:  # noqa: BLE001, S110 - it is being thrown away
        pass

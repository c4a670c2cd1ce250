"""Change counters (the cache seam): the API serves inventory lists from memory, never stale.

Every transaction writing a table a view reads (``WATCHED``, recognised on the engine)
bumps that view's row of ``generations`` just before it commits. A reader reads the
generation, then on a cache miss the rows, so a cache entry is never older than its
generation (``acceld.api.listcache``). A read is reused for ``KEEP_FOR`` seconds and a
commit that bumps returns ``FRESH_FOR`` (longer) after it, so no answer predates a write
its client saw finish.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import sqlalchemy
from oslo_db import exception as db_exc
from sqlalchemy import event

from acceld.db import models

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

_DIRTY = "acceld.dirty_views"   # Connection.info key: the views its transaction wrote
_SETTLE = threading.local()   # .due: this thread's last commit bumped a generation

_table = models.Generation.__table__
_BUMP = (sqlalchemy.update(_table).where(_table.c.name == sqlalchemy.bindparam("view"))
         .values(value=_table.c.value + 1))
_READ = sqlalchemy.select(_table.c.value).where(_table.c.name == sqlalchemy.bindparam("view"))


def views_written(statement: str) -> tuple[str, ...]:
    """The views whose tables ``statement`` writes (none for a read)."""
    if statement[:6].upper() in ("SELECT", "BEGIN", "SAVEPO", "RELEAS", "PRAGMA"):
        return ()
    match = _WRITE.match(statement)
    return _VIEWS_OF.get(match.group(1).lower(), ()) if match else ()


def watch(engine: sqlalchemy.engine.Engine) -> None:
    """Note on each connection of ``engine`` the views its open transaction wrote."""

    @event.listens_for(engine, "before_cursor_execute")
    def _note(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
              executemany: bool) -> None:
        views = views_written(statement)
        if views:
            conn.info.setdefault(_DIRTY, set()).update(views)

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def _forget(conn: Any) -> None:
        if not conn.invalidated:   # a lost connection's info raises; its record is reset
            conn.info.pop(_DIRTY, None)


def refuse_writes(engine: sqlalchemy.engine.Engine, where: str) -> None:
    """RuntimeError for a statement on ``engine`` (``where``) writing a generation's tables."""

    @event.listens_for(engine, "before_cursor_execute")
    def _refuse(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
                executemany: bool) -> None:
        if views_written(statement):
            raise RuntimeError(f"a write to a generation's tables needs a transaction "
                               f"(Database.write_rows), not {where}")


def bump(conn: sqlalchemy.Connection) -> None:
    """Bumps, in ``conn``'s transaction, the generations of the views it wrote."""
    views = conn.info.pop(_DIRTY, None)
    if views:
        for view in sorted(views):   # one order everywhere: no lock cycles
            conn.execute(_BUMP, {"view": view})
        _SETTLE.due = True


def settle() -> None:
    """After a commit (or its failure): waits ``FRESH_FOR`` when it bumped a generation."""
    due, _SETTLE.due = getattr(_SETTLE, "due", False), False
    if due:
        _sleep(FRESH_FOR)


class Reader:
    """Reads generations (one statement each), reusing a read for ``KEEP_FOR``."""

    def __init__(self, db: Any) -> None:
        self._db = db       # acceld.db.api.Database
        self._kept: dict[str, tuple[float, int]] = {}   # view -> (sent at, generation)
        self._kept_lock = threading.Lock()

    def _query(self, view: str) -> int | None:
        with self._db.autocommit(write=False) as conn:
            return conn.execute(_READ, {"view": view}).scalar()

    def read(self, view: str) -> int | None:
        """The view's generation now; None where the row is missing ("do not cache")."""
        sent = _clock()     # before the query goes out: the read is at least this new
        kept = self._kept.get(view)
        if kept is not None and sent - kept[0] < KEEP_FOR:
            return kept[1]
        try:
            value = self._query(view)
        except db_exc.DBConnectionError:
            value = self._query(view)
        if value is None:
            return None
        value = int(value)
        with self._kept_lock:   # a slower read sent earlier must not replace a newer one
            kept = self._kept.get(view)
            if kept is None or kept[0] < sent:
                self._kept[view] = (sent, value)
        return value

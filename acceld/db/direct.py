"""One-statement writes on a thread's own DBAPI connection (MySQL and PostgreSQL).

Some writes are one statement: create a device profile, delete one by uuid, create an ARQ
from a known one-unit profile, delete an ARQ that holds nothing. In autocommit such a
statement carries its own commit, and through SQLAlchemy the rest of its cost is
SQLAlchemy's: pool checkout and checkin with their listeners, the Connection, the
execution context. On MariaDB that was 113 us of CPU for a one-row DELETE against 40 us
for the driver alone, and a device profile create-and-delete over HTTP ran 20% faster
without it (``bench/results``, the issue note). :class:`Direct` runs such a statement as
SQL compiled once per dialect, on a cursor of a DBAPI connection that its thread keeps.

Each connection comes from the autocommit pool of :meth:`Database.autocommit`, so the
pool's connect listeners (oslo.db's SQL mode, autocommit) have run on it, and is then
detached from the pool. What the pool did on every checkout is done here:

- a connection unused for ``PING_AFTER_IDLE`` is pinged first, and replaced when the
  ping fails;
- one made by another process (the API forks its workers) is dropped without being
  closed: its socket belongs to the parent;
- the connections of threads that have ended are closed when a thread takes a new one.

Errors: a lost connection is closed and raises oslo.db's ``DBConnectionError``, as on the
pool (whether the statement committed is unknown, as with any database). Any other
database error means the server rolled the statement back; :meth:`Direct.write` then
answers None and the caller runs the statement through SQLAlchemy, whose oslo.db filters
raise the error as ``DBDuplicateEntry``, ``DBReferenceError``, ``DBDeadlock`` or whichever
applies (or the statement succeeds, when what stopped it has gone meanwhile). A
statement that needs SQLAlchemy at execution (a bind type that converts its value for this
dialect, a Python-side column default, an IN list expanded per call, a positional
paramstyle) is never run here: :meth:`Direct.write` answers None for it at once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import sqlalchemy
from oslo_db import exception as db_exc
from sqlalchemy.sql.expression import Executable

from acceld.db import generations


class _Plan(NamedTuple):
    sql: str
    compiled: Any               # sqlalchemy's Compiled: construct_params() names the binds


class _Held:
    __slots__ = ("conn", "pid", "used", "thread")

    def __init__(self, conn: Any, thread: threading.Thread) -> None:
        self.conn = conn                    # a detached PoolProxiedConnection
        self.pid = os.getpid()
        self.used = time.monotonic()
        self.thread = thread


class Direct:
    """Runs one-statement writes of one engine (in autocommit) on per-thread
    connections. ``listeners`` are called with each statement's SQL before it is sent
    (tests count statements with them, as with the engines' ``before_cursor_execute``)."""

    def __init__(self, engine: sqlalchemy.engine.Engine, ping_after_idle: float) -> None:
        self.engine = engine
        self.dialect = engine.dialect
        self.ping_after_idle = ping_after_idle
        self.listeners: list[Callable[[str], None]] = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: dict[int, _Held] = {}        # id(held) -> held, for closing
        self._plans: dict[tuple[Any, tuple[str, ...]], _Plan | None] = {}
        self._dbapi_error = self.dialect.loaded_dbapi.Error

    # -- statements ---------------------------------------------------------------------

    def plan(self, stmt: Executable, keys: tuple[str, ...]) -> _Plan | None:
        """The SQL of ``stmt`` for parameters named ``keys``, or None when it needs
        SQLAlchemy at execution. Refuses (RuntimeError) a write to a generation's tables,
        as the autocommit pool does."""
        cache_key = (stmt, keys)
        try:
            return self._plans[cache_key]
        except KeyError:
            pass
        plan = self._compile(stmt, keys)
        with self._lock:
            self._plans[cache_key] = plan
        return plan

    def _compile(self, stmt: Executable, keys: tuple[str, ...]) -> _Plan | None:
        dialect = self.dialect
        if dialect.positional:
            return None
        compiled = stmt.compile(dialect=dialect, column_keys=list(keys))
        sql = compiled.string
        if generations.views_written(sql):
            raise RuntimeError("a write to a generation's tables needs a transaction "
                               "(Database.write_rows), not a one-statement write")
        # rendered at each execution: expanding IN lists, literal_execute values
        if "POSTCOMPILE" in sql or getattr(compiled, "insert_prefetch", None) or \
                getattr(compiled, "update_prefetch", None):
            return None
        for bind in compiled.binds.values():
            if bind.type.dialect_impl(dialect).bind_processor(dialect) is not None:
                return None
        return _Plan(sql, compiled)

    def write(self, stmt: Executable, params: dict[str, Any]) -> int | None:
        """Runs ``stmt`` once, committing by itself; its rowcount, or None when the
        caller is to run it through SQLAlchemy instead (see the module's docstring)."""
        plan = self.plan(stmt, tuple(sorted(params)))
        if plan is None:
            return None
        values = plan.compiled.construct_params(params)
        for listener in self.listeners:
            listener(plan.sql)
        held = self._connection()
        conn = held.conn
        try:
            cursor = conn.cursor()
        except self._dbapi_error as exc:
            self._lost(held, exc)
        try:
            cursor.execute(plan.sql, values)
            return cursor.rowcount
        except self._dbapi_error as exc:
            if self.dialect.is_disconnect(exc, conn.dbapi_connection, cursor):
                self._lost(held, exc)
            return None
        finally:
            held.used = time.monotonic()
            try:
                cursor.close()
            except self._dbapi_error:
                pass

    # -- connections --------------------------------------------------------------------

    def connection(self) -> Any:
        """This thread's DBAPI connection, opened (or replaced) as :meth:`write` would."""
        return self._connection().conn.dbapi_connection

    def _connection(self) -> _Held:
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None and held.pid != os.getpid():
            held = self._local.held = None      # the parent's: leave its socket alone
            with self._lock:
                self._all.clear()
        if held is not None and id(held) not in self._all:
            held = self._local.held = None      # closed by dispose()
        if held is not None and time.monotonic() - held.used > self.ping_after_idle:
            try:
                self.dialect.do_ping(held.conn.dbapi_connection)
            except Exception:   # noqa: BLE001 - any failure: a new connection
                self._close(held)
                held = None
        if held is None:
            held = self._open()
        return held

    def _open(self) -> _Held:
        proxy = self.engine.raw_connection()    # connect listeners; pool-side ping
        proxy.detach()
        held = _Held(proxy, threading.current_thread())
        with self._lock:
            ended = [h for h in self._all.values() if not h.thread.is_alive()]
            for h in ended:
                del self._all[id(h)]
            self._all[id(held)] = held
        for h in ended:
            _quietly_close(h)
        self._local.held = held
        return held

    def _close(self, held: _Held) -> None:
        with self._lock:
            self._all.pop(id(held), None)
        if getattr(self._local, "held", None) is held:
            self._local.held = None
        _quietly_close(held)

    def _lost(self, held: _Held, exc: Exception) -> None:
        self._close(held)
        raise db_exc.DBConnectionError(exc) from exc

    def count(self) -> int:
        """Connections held now, by all threads."""
        with self._lock:
            return len(self._all)

    def dispose(self) -> None:
        """Closes every held connection (a thread that uses one later opens another)."""
        with self._lock:
            held, self._all = list(self._all.values()), {}
        for h in held:
            _quietly_close(h)


def _quietly_close(held: _Held) -> None:
    if held.pid != os.getpid():
        return
    try:
        held.conn.close()
    except Exception:   # noqa: BLE001, S110 - closing a connection that may be dead
        pass

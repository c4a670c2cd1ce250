"""Engine and transaction set-up over oslo.db's enginefacade.

``Database`` owns one enginefacade transaction context (not the global one, so several
databases can live in one process, as the tests need). ``writer()`` and ``reader()`` yield
a session inside one transaction: commit on success, rollback on error, with oslo.db's
translation of duplicate-entry and deadlock errors on every backend.

SQLite (the embedded default) runs in WAL mode with a busy timeout, and a writer opens its
transaction with ``BEGIN IMMEDIATE`` so two writers queue on the lock instead of one
failing with "database is locked" when it upgrades a read lock.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import sqlalchemy
from oslo_db.sqlalchemy import enginefacade
from sqlalchemy import event
from sqlalchemy.orm import Session

from acceld.db import direct, generations

_MODE = threading.local()


def _is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def _utf8mb4(url: str) -> str:
    """A MySQL or MariaDB URL with ``charset=utf8mb4`` (whatever charset it names):
    oslo.db connects with ``utf8``, 3-byte UTF-8, when the URL names none, and a
    character outside the BMP (an emoji) then fails the statement. The tables are
    utf8mb4 too (migration 0009). Any other URL is returned unchanged."""
    parsed = sqlalchemy.engine.make_url(url)
    if parsed.get_backend_name() not in _MYSQL_DIALECTS or \
            parsed.query.get("charset") == "utf8mb4":
        return url
    return parsed.update_query_dict({"charset": "utf8mb4"}).render_as_string(
        hide_password=False)


def _install_sqlite_hooks(engine: sqlalchemy.engine.Engine) -> None:
    # oslo.db turns pysqlite's implicit BEGIN off and emits its own plain "BEGIN"; writers
    # need "BEGIN IMMEDIATE". Rewriting the statement does not depend on listener order
    # (SQLAlchemy 2.1 ignores insert=True for engine events).
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # noqa: ANN001 - DBAPI objects
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout = 30000")
        cur.execute("PRAGMA foreign_keys = ON")
        if engine.url.database not in (None, "", ":memory:"):
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "before_cursor_execute", retval=True)
    def _immediate(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        if statement == "BEGIN" and getattr(_MODE, "writer", False):
            statement = "BEGIN IMMEDIATE"
        return statement, parameters


_POOL_OPTIONS = ("max_pool_size", "max_overflow", "pool_timeout")


def _pool_sqlite_connections(engine: sqlalchemy.engine.Engine,
                             options: dict[str, Any]) -> None:
    """Keep file-database connections open between transactions.

    oslo.db puts SQLite file databases on a NullPool, so every transaction opened a new
    connection and ran the connect pragmas again: that was half the cost of a small read.
    A QueuePool keeps them (one thread at a time per connection; the pool hands them
    between threads, which pysqlite allows once ``check_same_thread`` is off), sized by
    the engine options the other backends' pools take (``max_pool_size``,
    ``max_overflow``, ``pool_timeout``). The connect listeners (pragmas, foreign keys)
    move over with the pool's dispatch.
    """
    old = engine.pool
    if not isinstance(old, sqlalchemy.pool.NullPool) or engine.url.database in (
            None, "", ":memory:"):
        return
    engine.pool = sqlalchemy.pool.QueuePool(
        old._creator, pool_size=options.get("max_pool_size") or 8,
        max_overflow=options.get("max_overflow", 32),
        timeout=options.get("pool_timeout") or 30,
        _dispatch=old.dispatch, dialect=old._dialect,
        reset_on_return=old._reset_on_return)
    old.dispose()


_DIRTY = "acceld.dirty"     # connection_record.info key: statements ran since the last end


# SQLAlchemy names the dialect of a ``mysql://`` URL "mysql" and of a ``mariadb://`` one
# "mariadb"; both are the MySQL family here.
_MYSQL_DIALECTS = frozenset({"mysql", "mariadb"})


def _skip_needless_rollbacks(engine: sqlalchemy.engine.Engine) -> None:
    """MySQL: no ``ROLLBACK`` on pool return after a transaction that has ended.

    The pool rolls back every connection it takes back, and on MySQL that is a round trip
    even when the transaction has just committed: one in five of a short transaction's
    round trips. Here the pool leaves reset to the ``reset`` listener, which rolls back
    only a connection that may hold a transaction: one checked out and not since ended by
    a successful commit or rollback through the dialect, or one that ran a statement
    after that (a raw DBAPI checkout that commits by itself stays dirty). Explicit
    rollbacks are untouched: only the return path skips.
    """
    dialect = engine.dialect
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def clean(proxied: Any) -> None:
        info = getattr(proxied, "info", None)   # the pool's proxy; a bare DBAPI one has none
        if isinstance(info, dict):
            info[_DIRTY] = False

    def do_commit(dbapi_connection: Any) -> None:
        commit(dbapi_connection)
        clean(dbapi_connection)

    def do_rollback(dbapi_connection: Any) -> None:
        rollback(dbapi_connection)
        clean(dbapi_connection)

    dialect.do_commit, dialect.do_rollback = do_commit, do_rollback  # type: ignore[method-assign]

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection, record, proxy):  # noqa: ANN001
        record.info[_DIRTY] = True      # until a commit or rollback through the dialect

    @event.listens_for(engine, "before_cursor_execute")
    def _dirty(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        conn.info[_DIRTY] = True

    @event.listens_for(engine, "reset")
    def _reset(dbapi_connection, record, reset_state):  # noqa: ANN001
        if reset_state.terminate_only or not reset_state.asyncio_safe:
            return                  # being closed: nothing to keep
        if record.info.get(_DIRTY, True):
            dbapi_connection.rollback()
            record.info[_DIRTY] = False

    # SQLAlchemy has no public setter for a built pool's reset style; "none" hands the
    # whole reset to the listener above (tests/functional/test_db_round_trips.py checks
    # both halves: no ROLLBACK after a COMMIT, and a dirty connection still rolled back).
    engine.pool._reset_on_return = sqlalchemy.pool.base.reset_none


# A pooled connection unused for longer than this (seconds) is pinged before it is handed
# out; one used more recently is not.
PING_AFTER_IDLE = 1.0
_USED = "acceld.used_at"    # connection_record.info key: when it was last connected or in


def _ping_idle_connections_only(engine: sqlalchemy.engine.Engine) -> None:
    """Ping a pooled connection before use only when it has sat idle.

    oslo.db turns on SQLAlchemy's pre-ping, a round trip before every transaction: on
    MariaDB one in five of a short transaction's. What it guards against is a connection
    that died while it sat in the pool (a database restart or failover, a server-side
    idle timeout, a proxy dropping idle sessions). A connection given back a moment ago
    was alive then; a restart that both stops and starts the server in less than
    ``PING_AFTER_IDLE`` is the case left out, and it already fails the transactions in
    flight. A ping that fails raises DisconnectionError, on which the pool reconnects and
    checks out again, as with the pre-ping.
    """
    engine.pool._pre_ping = False   # no public setter on a built pool; recreate() copies it
    dialect = engine.dialect

    @event.listens_for(engine, "connect")
    def _connected(dbapi_connection, record):  # noqa: ANN001 - DBAPI objects
        record.info[_USED] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection, record):  # noqa: ANN001
        if record is not None:
            record.info[_USED] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection, record, proxy):  # noqa: ANN001
        if time.monotonic() - record.info.get(_USED, 0.0) <= PING_AFTER_IDLE:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise sqlalchemy.exc.DisconnectionError(str(exc)) from exc


def _autocommit_connections(engine: sqlalchemy.engine.Engine) -> None:
    """Every connection of ``engine`` in autocommit, with no ``ROLLBACK`` on close or on
    return to the pool (nothing is ever left open), and no statement that writes a
    generation's tables (see :meth:`Database.autocommit`)."""
    dialect = engine.dialect
    dialect.skip_autocommit_rollback = True

    @event.listens_for(engine, "checkout")
    def _autocommit(dbapi_connection, record, proxy):  # noqa: ANN001 - DBAPI objects
        if not dialect.detect_autocommit_setting(dbapi_connection):   # a local flag
            dialect.set_isolation_level(dbapi_connection, "AUTOCOMMIT")

    @event.listens_for(engine, "before_cursor_execute")
    def _no_generation_tables(conn, cursor, statement, parameters, context,  # noqa: ANN001
                              executemany):
        generations.refuse_outside_transaction(statement, "Database.autocommit")


class Database:
    """One database: a private enginefacade context plus transaction helpers."""

    def __init__(self, connection: str, **engine_options: object) -> None:
        connection = _utf8mb4(connection)
        self.url = connection
        # an in-memory SQLite database: every new connection is a database of its own
        self._in_memory = False
        if _is_sqlite(connection):
            path = sqlalchemy.engine.make_url(connection).database
            self._in_memory = path in (None, "", ":memory:")
            if not self._in_memory:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._ctx = enginefacade.transaction_context()
        # thread_checkin: oslo.db's eventlet-era time.sleep(0) on every connection checkin
        # (acceld runs on native threads; it cost ~0.1 ms per transaction).
        engine_options.setdefault("thread_checkin", False)
        # a SQLite file's pool is acceld's own (_pool_sqlite_connections): oslo.db puts
        # SQLite on a NullPool, which takes no sizes
        self._ctx.configure(connection=connection, sqlite_fk=True, **(
            {k: v for k, v in engine_options.items() if k not in _POOL_OPTIONS}
            if _is_sqlite(connection) else engine_options))
        self._engine: sqlalchemy.engine.Engine | None = None
        self._generations: generations.Reader | None = None
        self._autocommit: sqlalchemy.engine.Engine | None = None
        self._direct: direct.Direct | None = None
        self._ids_reused: bool | None = None
        self._engine_options = engine_options
        self._lock = threading.Lock()

    @property
    def engine(self) -> sqlalchemy.engine.Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    engine = self._ctx.writer.get_engine()
                    _ping_idle_connections_only(engine)
                    if _is_sqlite(self.url):
                        _install_sqlite_hooks(engine)
                        _pool_sqlite_connections(engine, self._engine_options)
                    elif engine.dialect.name in _MYSQL_DIALECTS:
                        _skip_needless_rollbacks(engine)
                    generations.install(engine)
                    self._engine = engine
        return self._engine

    @property
    def engines(self) -> list[sqlalchemy.engine.Engine]:
        """Every engine this database sends statements through: the pooled one and, on
        MySQL and PostgreSQL, the autocommit one of :meth:`autocommit`."""
        if _is_sqlite(self.url):
            return [self.engine]
        return [self.engine, self._autocommit_engine()]

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def updates_tables_together(self) -> bool:
        """Whether one UPDATE can change rows of two tables (MySQL and MariaDB), so a
        change that must touch both atomically can commit as one statement."""
        return self.dialect in _MYSQL_DIALECTS

    @property
    def ids_reused(self) -> bool:
        """Whether an autoincrement id of a deleted row can be handed out again (True
        until the server says otherwise). SQLite gives the largest id + 1 (a deleted last
        row's id comes back); MySQL before 8.0 and MariaDB before 10.2.4 reset their
        counter to that on a restart. PostgreSQL's sequences, MariaDB 10.2.4+ and MySQL
        8.0+ (the counter survives restarts) never do."""
        if self._ids_reused is None:
            if _is_sqlite(self.url):
                self._ids_reused = True
            else:
                dialect = self._autocommit_engine().dialect
                version = dialect.server_version_info     # known after a first connect
                if dialect.name == "postgresql":
                    self._ids_reused = False
                elif dialect.name in _MYSQL_DIALECTS and version is not None:
                    first = (10, 2, 4) if getattr(dialect, "is_mariadb", False) else (8, 0)
                    self._ids_reused = tuple(version[:len(first)]) < first
                else:
                    return True
        return self._ids_reused

    @contextlib.contextmanager
    def writer(self) -> Iterator[Session]:
        """A session in one read-write transaction."""
        self.engine  # noqa: B018 - make sure hooks are installed before first use
        _MODE.writer = True
        try:
            with self._ctx.writer.using(types.SimpleNamespace()) as session:
                yield session
        finally:
            _MODE.writer = False

    @contextlib.contextmanager
    def reader(self) -> Iterator[Session]:
        """A session in one read-only transaction."""
        self.engine  # noqa: B018
        with self._ctx.reader.using(types.SimpleNamespace()) as session:
            yield session

    @contextlib.contextmanager
    def write_rows(self) -> Iterator[sqlalchemy.engine.Connection]:
        """A plain Core connection in one read-write transaction: commit on success,
        rollback on error, ``BEGIN IMMEDIATE`` on SQLite like :meth:`writer`, and the same
        oslo.db error translation (it is registered on the engine). For short hot writes
        that need no ORM unit of work."""
        engine = self.engine
        _MODE.writer = True
        try:
            with engine.begin() as conn:
                yield conn
        finally:
            _MODE.writer = False

    @contextlib.contextmanager
    def autocommit(self, *, write: bool) -> Iterator[sqlalchemy.engine.Connection]:
        """A Core connection on which each statement is a transaction of its own
        (autocommit), for work that is one statement: a write carries its commit and a
        read ends with nothing left open, which saves the ``COMMIT`` of
        :meth:`write_rows` or the ``ROLLBACK`` of :meth:`rows`, a round trip each on
        MySQL and PostgreSQL. Never for work that needs several statements to be atomic
        or to see one snapshot, and never for a write to a generation's tables
        (``acceld.db.generations``: their bump rides on a transaction's commit; such a
        statement is refused). SQLite, in process, gets :meth:`write_rows` for a write
        (its ``BEGIN IMMEDIATE``) and :meth:`rows` for a read."""
        if _is_sqlite(self.url):
            with (self.write_rows() if write else self.rows()) as conn:
                yield conn
            return
        with self._autocommit_engine().connect() as conn:
            yield conn

    def write_one(self, stmt: Any, params: dict[str, Any]) -> int:
        """Runs one writing statement as a transaction of its own and returns its
        rowcount. It goes to :attr:`direct` (DBAPI connections of its own, no SQLAlchemy
        execution), or through :meth:`autocommit` when that declines it (on SQLite, a
        :meth:`write_rows` transaction). The same rules as
        :meth:`autocommit`: work that is one statement, never a generation's tables."""
        runner = self.direct
        if runner is not None:
            rowcount = runner.write(stmt, params)
            if rowcount is not None:
                return rowcount
        with self.autocommit(write=True) as conn:
            return conn.execute(stmt, params).rowcount

    def read(self, stmt: Any, params: dict[str, Any]) -> list[direct.Record]:
        """The rows of one SELECT, run as a statement of its own (autocommit: its own
        snapshot, nothing left open), each a :class:`direct.Record` (keys and
        attributes). It goes to :attr:`direct`, or through :meth:`autocommit` when that
        declines it. Never for reads that must share a snapshot with another."""
        runner = self.direct
        if runner is not None:
            rows = runner.read(stmt, params)
            if rows is not None:
                return rows
        with self.autocommit(write=False) as conn:
            return [direct.Record(row) for row in conn.execute(stmt, params).mappings()]

    @property
    def direct(self) -> direct.Direct | None:
        """The runner of one-statement writes and reads; None for an in-memory SQLite database
        (there every new connection would be a database of its own)."""
        if self._direct is None:
            if self._in_memory:
                return None
            sqlite = _is_sqlite(self.url)
            engine = self.engine if sqlite else self._autocommit_engine()
            with self._lock:
                if self._direct is None:
                    self._direct = direct.Direct(engine, PING_AFTER_IDLE,
                                                max_idle=engine.pool.size(),
                                                set_autocommit=sqlite)
        return self._direct

    def _autocommit_engine(self) -> sqlalchemy.engine.Engine:
        if self._autocommit is None:
            with self._lock:
                if self._autocommit is None:
                    ctx = enginefacade.transaction_context()
                    # made on first use, inside a request: no connect-and-retry at
                    # creation (oslo.db's default waits up to 10 x 10 s for a database
                    # that is down); a request then fails at once, as on the other pool
                    ctx.configure(connection=self.url, sqlite_fk=True,
                                  **dict(self._engine_options, max_retries=0))
                    engine = ctx.writer.get_engine()
                    _ping_idle_connections_only(engine)
                    _autocommit_connections(engine)
                    self._autocommit = engine
        return self._autocommit

    @contextlib.contextmanager
    def rows(self) -> Iterator[sqlalchemy.engine.Connection]:
        """A plain Core connection for read-only statements: no ORM session around it
        (a third cheaper for the hot list reads). Ends with a rollback; never write
        through it."""
        with self.engine.connect() as conn:
            yield conn

    def generation(self, view: str) -> int | None:
        """``view``'s change counter now (``acceld.db.generations``)."""
        reader = self._generations
        if reader is None:
            engine = self.engine
            with self._lock:    # one reader: a second would keep connections dispose misses
                if self._generations is None:
                    self._generations = generations.Reader(engine)
                reader = self._generations
        return reader.read(view)

    def dispose(self) -> None:
        if self._generations is not None:
            self._generations.close()
            self._generations = None
        if self._direct is not None:
            self._direct.dispose()
            self._direct = None
        if self._autocommit is not None:
            self._autocommit.dispose()
            self._autocommit = None
        if self._engine is not None:
            self._engine.dispose()


def default_sqlite_url(state_path: str) -> str:
    return "sqlite:///" + os.path.join(state_path, "acceld.sqlite")

"""The one way into the database: engines built with SQLAlchemy's public API, and the
transactions every function of ``acceld.objects`` runs in.

``Database`` owns one pooled engine and a second one whose connections are in autocommit,
for work that is one statement. Its helpers:

- :meth:`Database.write_rows` / :meth:`Database.writer`: one read-write transaction on
  a Core connection / an ORM session over that connection; commit on success, rollback
  on error. Before the commit, the generations of the views the transaction wrote are
  bumped on the same connection (``acceld.db.generations``).
- :meth:`Database.rows` / :meth:`Database.reader`: the same for reads (ends with a
  rollback).
- :meth:`Database.autocommit`: one statement that is a transaction of its own.

oslo.db's exception filters are registered on every engine, so duplicate-entry,
foreign-key, deadlock and connection errors come as oslo.db's exceptions on every backend.

SQLite (the embedded default) runs in WAL mode with a busy timeout, and a writer opens its
transaction with ``BEGIN IMMEDIATE`` so two writers queue on the lock instead of one
failing with "database is locked" when it upgrades a read lock.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import exc_filters
from sqlalchemy import event
from sqlalchemy.orm import Session

from acceld.db import generations

# SQLAlchemy names the dialect of a ``mysql://`` URL "mysql" and of a ``mariadb://`` one
# "mariadb"; both are the MySQL family here.
_MYSQL_DIALECTS = frozenset({"mysql", "mariadb"})

# A pooled connection unused for longer than this (seconds) is pinged before it is handed
# out; one used more recently is not.
PING_AFTER_IDLE = 1.0
_USED = "acceld.used_at"    # connection_record.info key: when it was last connected or in
_PID = "acceld.pid"         # connection_record.info key: the process that connected it
_WRITER = "acceld_writer"   # execution option of a writer's connections (SQLite's BEGIN)

# oslo.db's defaults for a server's pool
_POOL_SIZE, _MAX_OVERFLOW, _POOL_TIMEOUT, _RECYCLE = 5, 50, 30, 3600
# pymysql.constants.SERVER_STATUS.SERVER_STATUS_IN_TRANS: a transaction is open
_IN_TRANSACTION = 1


def _is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def _in_memory(url: sqlalchemy.engine.URL) -> bool:
    return url.database in (None, "", ":memory:")


def _utf8mb4(url: str) -> str:
    """A MySQL or MariaDB URL with ``charset=utf8mb4`` (whatever charset it names):
    PyMySQL otherwise connects with 3-byte UTF-8, and a character outside the BMP (an
    emoji) then fails the statement. The tables are utf8mb4 too (migration 0009). Any
    other URL is returned unchanged."""
    parsed = sqlalchemy.engine.make_url(url)
    if parsed.get_backend_name() not in _MYSQL_DIALECTS or \
            parsed.query.get("charset") == "utf8mb4":
        return url
    return parsed.update_query_dict({"charset": "utf8mb4"}).render_as_string(
        hide_password=False)


def _make_engine(url: str, pool: dict[str, Any], *, autocommit: bool = False
                 ) -> sqlalchemy.engine.Engine:
    """An engine of ``url`` with acceld's settings. ``autocommit``: every connection in
    autocommit, nothing rolled back when it goes back to the pool (never on SQLite)."""
    parsed = sqlalchemy.engine.make_url(url)
    name = parsed.get_backend_name()
    options: dict[str, Any] = {"pool_pre_ping": False}   # _check_connections_on_checkout
    if name == "sqlite":
        options["connect_args"] = {"check_same_thread": False}
        if _in_memory(parsed):      # every connection would be a database of its own
            options["poolclass"] = sqlalchemy.pool.StaticPool
        else:
            options.update(poolclass=sqlalchemy.pool.QueuePool,
                           pool_size=pool.get("max_pool_size") or 8,
                           max_overflow=pool.get("max_overflow", 32),
                           pool_timeout=pool.get("pool_timeout") or _POOL_TIMEOUT)
        if autocommit:
            options.update(isolation_level="AUTOCOMMIT", skip_autocommit_rollback=True)
    else:
        options.update(pool_size=pool.get("max_pool_size") or _POOL_SIZE,
                       max_overflow=pool.get("max_overflow", _MAX_OVERFLOW),
                       pool_timeout=pool.get("pool_timeout") or _POOL_TIMEOUT,
                       pool_recycle=_RECYCLE)
        if name in _MYSQL_DIALECTS:
            options["connect_args"] = {"sql_mode": "TRADITIONAL"}
            # the reset listener of _rollback_only_open_transactions decides
            options["pool_reset_on_return"] = None
        elif name == "postgresql":
            options["client_encoding"] = "utf8"
        if autocommit:
            # enable_from_linting: the two-table compare-and-swap UPDATEs of
            # acceld.objects.arqs restrict each table by its key, with no join between
            # them, on purpose
            options.update(isolation_level="AUTOCOMMIT", skip_autocommit_rollback=True,
                           pool_reset_on_return=None, enable_from_linting=False)
    engine = sqlalchemy.create_engine(parsed, **options)
    _connect_errors_as_connection_errors(engine)    # first: oslo.db's filters re-raise
    exc_filters.register_engine(engine)
    _check_connections_on_checkout(engine)
    if name == "sqlite":
        _sqlite_settings(engine, autocommit)
    elif name in _MYSQL_DIALECTS and not autocommit:
        _rollback_only_open_transactions(engine)
    return engine


def _connect_errors_as_connection_errors(engine: sqlalchemy.engine.Engine) -> None:
    """A failure to connect is oslo.db's DBConnectionError (the API's 503) whatever the
    driver's wording: oslo.db's filters know PyMySQL's refusal but not libpq's newer
    "connection to server at ... failed"."""
    operational = engine.dialect.loaded_dbapi.OperationalError

    @event.listens_for(engine, "handle_error")
    def _refused(context: sqlalchemy.engine.ExceptionContext) -> None:
        if context.connection is None and \
                isinstance(context.original_exception, operational):
            raise db_exc.DBConnectionError(context.sqlalchemy_exception)


def _sqlite_settings(engine: sqlalchemy.engine.Engine, autocommit: bool) -> None:
    """pysqlite's own transaction handling off (it would begin a transaction on its own
    and never with IMMEDIATE); ``BEGIN`` for readers, ``BEGIN IMMEDIATE`` for writers,
    and none in ``autocommit``, where each statement is a transaction of its own (a write
    takes the write lock at once and waits up to the busy timeout, as ``BEGIN
    IMMEDIATE`` does)."""
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # noqa: ANN001 - DBAPI objects
        dbapi_conn.isolation_level = None
        for pragma in ("busy_timeout = 30000", "foreign_keys = ON") + (
                () if _in_memory(engine.url) else
                ("journal_mode = WAL", "synchronous = NORMAL")):
            dbapi_conn.execute(f"PRAGMA {pragma}")

    if autocommit:
        return

    @event.listens_for(engine, "begin")
    def _begin(conn: sqlalchemy.Connection) -> None:
        writer = conn.get_execution_options().get(_WRITER, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")


def _rollback_only_open_transactions(engine: sqlalchemy.engine.Engine) -> None:
    """MySQL: no ``ROLLBACK`` on pool return after a transaction that has ended.

    The pool rolls back every connection it takes back, and on MySQL that is a round trip
    even when the transaction has just committed: one in five of a short transaction's
    round trips. The engine is made with ``pool_reset_on_return=None`` and this ``reset``
    listener rolls back only a connection on which the server says a transaction is open
    (PyMySQL's ``server_status``, from the server's last answer; a driver that does not
    tell is always rolled back)."""
    @event.listens_for(engine, "reset")
    def _reset(dbapi_connection, record, reset_state):  # noqa: ANN001
        if reset_state.terminate_only or not reset_state.asyncio_safe:
            return                  # being closed: nothing to keep
        status = getattr(dbapi_connection, "server_status", None)
        if status is None or status & _IN_TRANSACTION:
            dbapi_connection.rollback()


def _check_connections_on_checkout(engine: sqlalchemy.engine.Engine) -> None:
    """What the pool checks as it hands a connection out.

    A connection made by another process (the API forks its workers) is dropped without
    being closed (its socket is the parent's) and replaced: SQLAlchemy's recipe for pools
    across ``fork``.

    A connection is pinged only when it has sat idle. SQLAlchemy's pre-ping (oslo.db
    turns it on) is a round trip before every transaction: on MariaDB one in five of a
    short transaction's. What it guards against is a connection that died while it sat in
    the pool (a database restart or failover, a server-side idle timeout, a proxy
    dropping idle sessions). A connection given back a moment ago was alive then; a
    restart that both stops and starts the server in less than ``PING_AFTER_IDLE`` is
    the case left out, and it already fails the transactions in flight. A ping that
    fails raises DisconnectionError, on which the pool reconnects and checks out again,
    as with the pre-ping.
    """
    dialect = engine.dialect

    @event.listens_for(engine, "connect")
    def _connected(dbapi_connection, record):  # noqa: ANN001 - DBAPI objects
        record.info[_PID] = os.getpid()
        record.info[_USED] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection, record):  # noqa: ANN001
        if record is not None:
            record.info[_USED] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection, record, proxy):  # noqa: ANN001
        info = record.info
        if info.get(_PID) != os.getpid():
            record.dbapi_connection = proxy.dbapi_connection = None
            raise sqlalchemy.exc.DisconnectionError("a connection of another process")
        if time.monotonic() - info.get(_USED, 0.0) <= PING_AFTER_IDLE:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise sqlalchemy.exc.DisconnectionError(str(exc)) from exc


class Database:
    """One database: its engines and the transaction helpers."""

    def __init__(self, connection: str, *, max_pool_size: int | None = None,
                 max_overflow: int | None = None, pool_timeout: int | None = None) -> None:
        connection = _utf8mb4(connection)
        self.url = connection
        parsed = sqlalchemy.engine.make_url(connection)
        self._in_memory = parsed.get_backend_name() == "sqlite" and _in_memory(parsed)
        if parsed.get_backend_name() == "sqlite" and not self._in_memory:
            os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), exist_ok=True)
        self._pool = {k: v for k, v in (("max_pool_size", max_pool_size),
                                        ("max_overflow", max_overflow),
                                        ("pool_timeout", pool_timeout)) if v is not None}
        self._engine: sqlalchemy.engine.Engine | None = None
        self._writer_engine: sqlalchemy.engine.Engine | None = None
        self._autocommit: sqlalchemy.engine.Engine | None = None
        self._generations = generations.Reader(self)
        self._ids_reused: bool | None = None
        self._lock = threading.Lock()

    @property
    def engine(self) -> sqlalchemy.engine.Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    engine = _make_engine(self.url, self._pool)
                    generations.watch(engine)
                    self._writer_engine = engine.execution_options(**{_WRITER: True})
                    self._engine = engine
        return self._engine

    def _autocommit_engine(self) -> sqlalchemy.engine.Engine:
        if self._autocommit is None:
            with self._lock:
                if self._autocommit is None:
                    engine = _make_engine(self.url, self._pool, autocommit=True)
                    generations.refuse_writes(engine, "Database.autocommit")
                    self._autocommit = engine
        return self._autocommit

    @property
    def engines(self) -> list[sqlalchemy.engine.Engine]:
        """Every engine this database sends statements through: the pooled one and the
        autocommit one of :meth:`autocommit` (none for an in-memory SQLite database)."""
        if self._in_memory:
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
    def write_rows(self) -> Iterator[sqlalchemy.engine.Connection]:
        """A Core connection in one read-write transaction: commit on success, rollback
        on error (``BEGIN IMMEDIATE`` on SQLite). The generations of the views it wrote
        are bumped just before the commit, and a commit that bumped one returns
        ``generations.FRESH_FOR`` after it."""
        self.engine  # noqa: B018 - builds the writer engine too
        try:
            with self._writer_engine.begin() as conn:
                yield conn
                generations.bump(conn)
        finally:
            generations.settle()

    @contextlib.contextmanager
    def writer(self) -> Iterator[Session]:
        """An ORM session in one read-write transaction (:meth:`write_rows`'s)."""
        with self.write_rows() as conn, Session(bind=conn, expire_on_commit=False,
                                                autoflush=True) as session:
            yield session
            session.flush()

    @contextlib.contextmanager
    def rows(self) -> Iterator[sqlalchemy.engine.Connection]:
        """A Core connection for read-only statements. Ends with a rollback; never write
        through it."""
        with self.engine.connect() as conn:
            yield conn

    @contextlib.contextmanager
    def reader(self) -> Iterator[Session]:
        """An ORM session for reads (:meth:`rows`'s connection)."""
        with self.rows() as conn, Session(bind=conn) as session:
            yield session

    @contextlib.contextmanager
    def autocommit(self, *, write: bool) -> Iterator[sqlalchemy.engine.Connection]:
        """A Core connection on which each statement is a transaction of its own
        (autocommit), for work that is one statement: a write carries its commit and a
        read ends with nothing left open, which saves the ``COMMIT`` of
        :meth:`write_rows` or the ``ROLLBACK`` of :meth:`rows`, a round trip each on
        MySQL and PostgreSQL. Never for work that needs several statements to be atomic
        or to see one snapshot, and never for a write to a generation's tables (their
        bump rides on a transaction's commit; such a statement is refused). An in-memory
        SQLite database (one connection: a second engine would be a second database)
        gets :meth:`write_rows` for a write and :meth:`rows` for a read."""
        if self._in_memory:
            with (self.write_rows() if write else self.rows()) as conn:
                yield conn
            return
        with self._autocommit_engine().connect() as conn:
            yield conn

    def generation(self, view: str) -> int | None:
        """``view``'s change counter now (``acceld.db.generations``)."""
        return self._generations.read(view)

    def dispose(self) -> None:
        if self._autocommit is not None:
            self._autocommit.dispose()
            self._autocommit = None
        if self._engine is not None:
            self._engine.dispose()


def default_sqlite_url(state_path: str) -> str:
    return "sqlite:///" + os.path.join(state_path, "acceld.sqlite")

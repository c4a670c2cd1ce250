"""The one way into the database: engines built with SQLAlchemy's public API, and the
transactions every function of ``acceld.objects`` runs in (:class:`Database`).

oslo.db's exception filters are registered on every engine, so database errors come as
oslo.db's exceptions on every backend. SQLite runs in WAL mode with a busy timeout, and a
writer begins with ``BEGIN IMMEDIATE`` so writers queue instead of failing as "locked".
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


def _in_memory(url: sqlalchemy.engine.URL) -> bool:
    return url.database in (None, "", ":memory:")


def _utf8mb4(url: str) -> str:
    """A MySQL or MariaDB URL with ``charset=utf8mb4`` (the tables' charset); others as given."""
    parsed = sqlalchemy.engine.make_url(url)
    if parsed.get_backend_name() not in _MYSQL_DIALECTS or \
            parsed.query.get("charset") == "utf8mb4":
        return url
    return parsed.update_query_dict({"charset": "utf8mb4"}).render_as_string(
        hide_password=False)


def _make_engine(url: str, pool: dict[str, Any], *, autocommit: bool = False
                 ) -> sqlalchemy.engine.Engine:
    """An engine of ``url`` with acceld's settings (``autocommit``: no rollback on return)."""
    parsed = sqlalchemy.engine.make_url(url)
    name = parsed.get_backend_name()
    sqlite = name == "sqlite"
    options: dict[str, Any] = {"pool_pre_ping": False}   # _check_connections_on_checkout
    if sqlite and _in_memory(parsed):   # every connection would be a database of its own
        options["poolclass"] = sqlalchemy.pool.StaticPool
    else:
        options.update(poolclass=sqlalchemy.pool.QueuePool,
                       pool_size=pool.get("max_pool_size") or (8 if sqlite else _POOL_SIZE),
                       max_overflow=pool.get("max_overflow", 32 if sqlite else _MAX_OVERFLOW),
                       pool_timeout=pool.get("pool_timeout") or _POOL_TIMEOUT)
    if autocommit:
        options.update(isolation_level="AUTOCOMMIT", skip_autocommit_rollback=True)
    if sqlite:
        options["connect_args"] = {"check_same_thread": False}
    else:
        options["pool_recycle"] = _RECYCLE
        if name in _MYSQL_DIALECTS:
            options["connect_args"] = {"sql_mode": "TRADITIONAL"}
            # the two-table compare-and-swap UPDATEs of acceld.objects.arqs restrict each
            # table by its key, with no join between them, on purpose (they run in a
            # transaction with their ledger line, and on the autocommit engine)
            options["enable_from_linting"] = False
            # the reset listener of _rollback_only_open_transactions decides
            options["pool_reset_on_return"] = None
        elif name == "postgresql":
            options["client_encoding"] = "utf8"
        if autocommit:
            options.update(pool_reset_on_return=None)
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
    """A failure to connect is DBConnectionError (503), whatever the driver's wording."""
    operational = engine.dialect.loaded_dbapi.OperationalError

    @event.listens_for(engine, "handle_error")
    def _refused(context: sqlalchemy.engine.ExceptionContext) -> None:
        if context.connection is None and \
                isinstance(context.original_exception, operational):
            raise db_exc.DBConnectionError(context.sqlalchemy_exception)


def _sqlite_settings(engine: sqlalchemy.engine.Engine, autocommit: bool) -> None:
    """``BEGIN`` for readers, ``BEGIN IMMEDIATE`` for writers, none in ``autocommit``."""
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
    """MySQL: roll back a returned connection only where a transaction is open."""
    @event.listens_for(engine, "reset")
    def _reset(dbapi_connection, record, reset_state):  # noqa: ANN001
        if reset_state.terminate_only or not reset_state.asyncio_safe:
            return                  # being closed: nothing to keep
        status = getattr(dbapi_connection, "server_status", None)
        if status is None or status & _IN_TRANSACTION:
            dbapi_connection.rollback()


def _check_connections_on_checkout(engine: sqlalchemy.engine.Engine) -> None:
    """What the pool checks as it hands a connection out: one made by another process
    (the API forks workers) is dropped unclosed and replaced (SQLAlchemy's fork recipe);
    one idle for over ``PING_AFTER_IDLE`` is pinged, instead of pre-pinging before every
    transaction (a round trip each). A failed ping is DisconnectionError: the pool
    reconnects, as with the pre-ping. Left out: a server restarted within that second."""
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
        """Every engine this database sends statements through."""
        if self._in_memory:
            return [self.engine]
        return [self.engine, self._autocommit_engine()]

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def updates_tables_together(self) -> bool:
        """Whether one UPDATE can change rows of two tables (MySQL and MariaDB)."""
        return self.dialect in _MYSQL_DIALECTS

    @property
    def ids_reused(self) -> bool:
        """Whether an autoincrement id of a deleted row can come back (SQLite, old MySQL)."""
        if self._ids_reused is None:
            if self.url.startswith("sqlite"):
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
        """A Core connection in one read-write transaction; generations bumped before commit."""
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

    def rows(self) -> sqlalchemy.engine.Connection:
        """A Core connection for reads (``with``: ends with a rollback)."""
        return self.engine.connect()

    @contextlib.contextmanager
    def reader(self) -> Iterator[Session]:
        """An ORM session for reads (:meth:`rows`'s connection)."""
        with self.rows() as conn, Session(bind=conn) as session:
            yield session

    @contextlib.contextmanager
    def autocommit(self, *, write: bool) -> Iterator[sqlalchemy.engine.Connection]:
        """A Core connection on which each statement is a transaction of its own, for
        work that is one statement (saves a COMMIT or ROLLBACK round trip). Never for
        statements that must be atomic together or share a snapshot, nor for writes to
        a generation's tables (refused). In-memory SQLite: :meth:`write_rows`/:meth:`rows`."""
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


def duplicate_entry(exc: Exception) -> bool:
    """For ``wrap_db_retry(exception_checker=...)``: a write that lost an insert race on
    a unique key (two processes creating the same row) is run again whole, and then finds
    the row."""
    return isinstance(exc, db_exc.DBDuplicateEntry)


def default_sqlite_url(state_path: str) -> str:
    return "sqlite:///" + os.path.join(state_path, "acceld.sqlite")

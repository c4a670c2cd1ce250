"""One-statement writes, and one-statement reads, on DBAPI connections of their own.

Some writes are one statement: create a device profile, delete one by uuid, create an ARQ
from a known one-unit profile, delete an ARQ that holds nothing. In autocommit such a
statement carries its own commit, and through SQLAlchemy the rest of its cost is
SQLAlchemy's: pool checkout and checkin with their listeners, the Connection, the
execution context. On MariaDB that was 113 us of CPU for a one-row DELETE against 40 us
for the driver alone, and a device profile create-and-delete over HTTP ran about 20%
faster without it. :class:`Direct` runs such a statement as SQL compiled once per
dialect, on a cursor of a DBAPI connection it keeps. A hot read that is one SELECT (an
ARQ by uuid; the rows a bind or an unbind decides from on MySQL) runs the same way:
:meth:`Direct.read` gives its rows with each column's value processed by the column
type's own result processor, as SQLAlchemy's result does.

Its connections come from the autocommit pool of :meth:`Database.autocommit` (on SQLite,
a file database, from the one pool, and are put in autocommit here), so the pool's
connect listeners (oslo.db's SQL mode; SQLite's pragmas) have run on them, and are then
detached from that pool. On SQLite a statement in autocommit takes the write lock at once
and waits for it up to the busy timeout, as the ``BEGIN IMMEDIATE`` of a transaction
does. Idle ones wait in a last-in-first-out list, shared by all
threads (a server that starts a thread per request reuses them as well), at most
``max_idle`` of them; a write takes the most recently used. What the pool did on every
checkout is done here:

- a connection unused for ``ping_after_idle`` seconds is pinged first, and replaced when
  the ping fails;
- connections made by another process (the API forks its workers) are dropped without
  being closed: their sockets belong to the parent.

Errors: a lost connection is closed and raises oslo.db's ``DBConnectionError``, as on the
pool (whether the statement committed is unknown, as with any database). Any other
database error means the server rolled the statement back; :meth:`Direct.write` then
answers None and the caller runs the statement through SQLAlchemy, whose oslo.db filters
raise the error as ``DBDuplicateEntry``, ``DBReferenceError``, ``DBDeadlock`` or whichever
applies (or the statement succeeds, when what stopped it has gone meanwhile). A
statement that needs SQLAlchemy at execution (a Python-side column default, a value
rendered into the SQL, bind names the dialect must escape) is never run here:
:meth:`Direct.write` answers None for it at once. An IN list expanded per call gets a
plan per list length (the SQL SQLAlchemy renders for that length, checked once against
its values), up to ``MAX_EXPANDED`` elements. A bind type that converts its value
for the dialect (SQLite's datetimes) is applied here with the type's own processor, and
SQLite's positional paramstyle is compiled as pysqlite's named one.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import sqlalchemy
from oslo_db import exception as db_exc
from sqlalchemy.sql.expression import Executable

from acceld.db import generations


class _Plan(NamedTuple):
    sql: str
    compiled: Any               # sqlalchemy's Compiled: construct_params() names the binds
    processors: tuple[tuple[str, Callable[[Any], Any]], ...]    # (bind name, its type's)
    # a SELECT's result columns: (key, its type's result processor or None); None for a
    # statement that returns no rows
    columns: tuple[tuple[str, Callable[[Any], Any] | None], ...] | None = None
    # what construct_params() does for these keys, worked out once: (bind name, the
    # parameter's key) for each value from the call, and the binds' own values for the
    # rest; None where a call must go through construct_params() (a bind's value is
    # computed per call, or a value it requires is missing: it raises)
    binds: tuple[tuple[str, str], ...] | None = None
    fixed: dict[str, Any] | None = None
    # a statement with expanding IN lists: (bind name, parameter key) of each; such a
    # plan is not run itself but gives one per list length (Direct._for_lengths)
    expanding: tuple[tuple[str, str], ...] = ()
    # in a plan for given lengths: (expanded bind name, key, index in the list)
    elements: tuple[tuple[str, str, int], ...] = ()

    def values(self, params: dict[str, Any]) -> dict[str, Any]:
        """The DBAPI parameters for ``params``: construct_params()'s, each bind's type's
        processor applied."""
        if self.binds is None:
            values = self.compiled.construct_params(params)
        else:
            values = self.fixed.copy()
            for name, key in self.binds:
                values[name] = params[key]
        for name, key, index in self.elements:
            values[name] = params[key][index]
        for name, process in self.processors:
            values[name] = process(values[name])
        return values


# the longest IN list given its own plan (a longer one goes through SQLAlchemy: a plan per
# length of any list a caller can send would be a cache without a bound)
MAX_EXPANDED = 16


def _for_lengths(plan: _Plan, params: dict[str, Any]) -> _Plan | None:
    """``plan`` (with expanding IN lists) for the lengths of the lists in ``params``: the
    SQL SQLAlchemy renders for them, each list's elements bound by position with the
    list's type's processor. Checked once against SQLAlchemy's own values for ``params``:
    None (SQLAlchemy's path) where they differ, or where the values of the other binds
    must come from construct_params() at each call."""
    if plan.binds is None:
        return None
    state = plan.compiled.construct_expanded_state(params)
    listed = {name for name, _key in plan.expanding}
    process = dict(plan.processors)
    elements, processors = [], [(n, p) for n, p in plan.processors if n not in listed]
    for name, key in plan.expanding:
        for index, element in enumerate(state.parameter_expansion.get(name, ())):
            elements.append((element, key, index))
            if process.get(name) is not None:
                processors.append((element, process[name]))
    sized = plan._replace(sql=state.statement, processors=tuple(processors),
                          binds=tuple(b for b in plan.binds if b[0] not in listed),
                          expanding=(), elements=tuple(elements))
    by_name = dict(processors)
    expected = {n: by_name[n](v) if n in by_name else v for n, v in state.parameters.items()}
    return sized if sized.values(params) == expected else None


def _binds(compiled: Any, keys: tuple[str, ...]
           ) -> tuple[tuple[tuple[str, str], ...] | None, dict[str, Any] | None]:
    """What ``compiled.construct_params(params)`` gives for parameters named ``keys``, as
    (bind name, key) pairs and fixed values (see ``_Plan``); (None, None) where it must run
    per call."""
    # values given to the statement itself (.params()), which a call's may override
    collected = getattr(compiled, "_collected_params", None) or {}
    pairs, fixed = [], {}
    for bind, name in compiled.bind_names.items():
        if bind.key in keys:
            pairs.append((name, bind.key))
        elif bind.key in collected:
            fixed[name] = collected[bind.key]
        elif name in keys:
            pairs.append((name, name))
        elif name in collected:
            fixed[name] = collected[name]
        elif bind.required or bind.callable:
            return None, None
        else:
            fixed[name] = bind.value
    return tuple(pairs), fixed


class Record(dict[str, Any]):
    """A row of :meth:`Direct.read`: a dict of the selected columns by key, whose
    values are also attributes (as on SQLAlchemy's rows)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _Held:
    __slots__ = ("conn", "pid", "used")

    def __init__(self, conn: Any) -> None:
        self.conn = conn                    # a detached PoolProxiedConnection
        self.pid = os.getpid()
        self.used = time.monotonic()


class Direct:
    """Runs one-statement writes and reads of one engine (in autocommit) on connections
    of its own. ``listeners`` are called with each statement's SQL before it is sent (tests
    count statements with them, as with the engines' ``before_cursor_execute``)."""

    def __init__(self, engine: sqlalchemy.engine.Engine, ping_after_idle: float,
                 max_idle: int, *, set_autocommit: bool = False) -> None:
        self.engine = engine
        self.dialect = engine.dialect
        # SQL with named parameters: pysqlite takes them too
        self._sql_dialect = (type(engine.dialect)(paramstyle="named")
                             if engine.dialect.name == "sqlite" else engine.dialect)
        self._set_autocommit = set_autocommit   # the pool's connections are not
        self.ping_after_idle = ping_after_idle
        self.max_idle = max_idle
        self.listeners: list[Callable[[str], None]] = []
        self._idle: collections.deque[_Held] = collections.deque()   # append/pop: atomic
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
        plan = self._plans[cache_key] = self._compile(stmt, keys)   # racing: same plan
        return plan

    def _runnable(self, stmt: Executable, params: dict[str, Any]) -> _Plan | None:
        """The plan to run ``stmt`` with ``params``: its plan, or for expanding IN lists
        the plan for these lists' lengths; None when SQLAlchemy is to run it."""
        keys = tuple(sorted(params))
        plan = self.plan(stmt, keys)
        if plan is None or not plan.expanding:
            return plan
        lengths = tuple(len(params[key]) for _name, key in plan.expanding)
        if max(lengths) > MAX_EXPANDED:
            return None
        cache_key = (stmt, keys, lengths)
        try:
            return self._plans[cache_key]
        except KeyError:
            pass
        sized = self._plans[cache_key] = _for_lengths(plan, params)
        return sized

    def _compile(self, stmt: Executable, keys: tuple[str, ...]) -> _Plan | None:
        dialect = self._sql_dialect
        if dialect.positional:
            return None
        compiled = stmt.compile(dialect=dialect, column_keys=list(keys))
        sql = compiled.string
        generations.refuse_outside_transaction(sql, "Database.write_one")
        # rendered at each execution: literal_execute values (here never), expanding IN
        # lists (a plan per length)
        expanding = tuple((name, bind.key) for bind, name in compiled.bind_names.items()
                          if bind.expanding)
        if any(bind.literal_execute for bind in compiled.bind_names) or \
                ("POSTCOMPILE" in sql and not expanding) or \
                getattr(compiled, "insert_prefetch", None) or \
                getattr(compiled, "update_prefetch", None) or compiled.escaped_bind_names:
            return None
        if any(key not in keys for _name, key in expanding):
            return None
        processors = []
        for bind, name in compiled.bind_names.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                processors.append((name, process))
        columns = None
        if isinstance(stmt, sqlalchemy.Select):
            selected = list(stmt.selected_columns)
            names = [column.key for column in selected]
            if len(set(names)) != len(names):
                return None             # SQLAlchemy would label them apart
            columns = tuple(
                (name, column.type.dialect_impl(dialect).result_processor(dialect, None))
                for name, column in zip(names, selected, strict=True))
        binds, fixed = _binds(compiled, keys)
        return _Plan(sql, compiled, tuple(processors), columns, binds, fixed, expanding)

    def read(self, stmt: Executable, params: dict[str, Any]) -> list[Record] | None:
        """Runs the SELECT ``stmt`` once (in autocommit: one statement, one snapshot of
        its own); its rows, each column's value processed as SQLAlchemy's result would
        (a MySQL boolean as a bool, a SQLite datetime as a datetime), or None when the
        caller is to run it through SQLAlchemy instead (as for :meth:`write`)."""
        plan = self._runnable(stmt, params)
        if plan is None or plan.columns is None:
            return None
        rows = self._execute(plan, params, fetch=True)
        if rows is None:
            return None
        columns = plan.columns
        return [Record({key: value if process is None or value is None else process(value)
                        for (key, process), value in zip(columns, row, strict=True)})
                for row in rows]

    def write(self, stmt: Executable, params: dict[str, Any]) -> int | None:
        """Runs ``stmt`` once, committing by itself; its rowcount, or None when the
        caller is to run it through SQLAlchemy instead (see the module's docstring)."""
        plan = self._runnable(stmt, params)
        if plan is None or plan.columns is not None:
            return None
        return self._execute(plan, params, fetch=False)

    def _execute(self, plan: _Plan, params: dict[str, Any], fetch: bool) -> Any:
        """The rows (``fetch``) or the rowcount of ``plan`` run once; None on a database
        error that is not a lost connection (the server rolled the statement back)."""
        values = plan.values(params)
        for listener in self.listeners:
            listener(plan.sql)
        held = self._take()
        conn = held.conn
        try:
            cursor = conn.cursor()
            try:
                cursor.execute(plan.sql, values)
                return cursor.fetchall() if fetch else cursor.rowcount
            finally:
                cursor.close()
        except self._dbapi_error as exc:
            if self.dialect.is_disconnect(exc, conn.dbapi_connection, None):
                _close(held)
                held = None
                raise db_exc.DBConnectionError(exc) from exc
            return None
        finally:
            if held is not None:
                self._give_back(held)

    # -- connections --------------------------------------------------------------------

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """A DBAPI connection as :meth:`write` takes one (the most recently used, pinged
        when idle), given back afterwards."""
        held = self._take()
        try:
            yield held.conn.dbapi_connection
        finally:
            self._give_back(held)

    def _take(self) -> _Held:
        pid = os.getpid()
        while True:
            try:
                held = self._idle.pop()
            except IndexError:
                return self._open()
            if held.pid != pid:
                self._idle.clear()          # all the parent's: leave their sockets alone
                return self._open()
            if time.monotonic() - held.used <= self.ping_after_idle:
                return held
            try:
                self.dialect.do_ping(held.conn.dbapi_connection)
            except Exception:   # noqa: BLE001 - any failure: try the next, or a new one
                _close(held)
                continue
            return held

    def _open(self) -> _Held:
        try:
            proxy = self.engine.raw_connection()    # connect listeners; the pool's ping
        except (self._dbapi_error, sqlalchemy.exc.DBAPIError) as exc:
            # the pool hands the driver's error on as it is (no oslo.db filter runs)
            raise db_exc.DBConnectionError(exc) from exc
        proxy.detach()
        if self._set_autocommit:
            self.dialect.set_isolation_level(proxy.dbapi_connection, "AUTOCOMMIT")
        return _Held(proxy)

    def _give_back(self, held: _Held) -> None:
        held.used = time.monotonic()
        if len(self._idle) < self.max_idle:
            self._idle.append(held)
        else:
            _close(held)

    def idle(self) -> int:
        """Connections waiting for a write now."""
        return len(self._idle)

    def dispose(self) -> None:
        """Closes the idle connections (one in use is given back later, and kept)."""
        while True:
            try:
                held = self._idle.pop()
            except IndexError:
                return
            _close(held)


def _close(held: _Held) -> None:
    if held.pid != os.getpid():
        return
    try:
        held.conn.close()
    except Exception:   # noqa: BLE001, S110 - closing a connection that may be dead
        pass

"""The binds Nova waits to hear about (``bind_waits``), kept in the database so that any
conductor owning the ARQs' host can finish a wait whose conductor died.

One row per instance: a newer bind request of the instance (its own ``token``) replaces
the older wait. Whoever deletes a row (:func:`take`) tells Nova, and only it: a DELETE
removes a row once, so no event goes out twice whatever the number of conductors. Every
function is one statement that commits by itself (``Database.autocommit``). Deadlines are
naive UTC, as every timestamp in the database, and are stored to the whole second
(MySQL's DATETIME keeps no fraction), rounded up so that a wait never ends early.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from oslo_db import api as oslo_db_api
from sqlalchemy import Insert, bindparam, delete, select, update
from sqlalchemy.dialects import mysql, postgresql, sqlite

from acceld.db import models as m
from acceld.db.api import Database

_bw = m.BindWait.__table__

# Concurrent upserts and deletes of neighbouring keys can deadlock on MariaDB (gap
# locks); each function is one statement, retried as a whole.
_retry_on_deadlock = oslo_db_api.wrap_db_retry(max_retries=10, retry_interval=0.02,
                                               inc_retry_interval=True,
                                               retry_on_deadlock=True)


class Wait(NamedTuple):
    """One instance's wait: its bind request (``token``), the ARQs' host and uuids."""

    instance: str
    token: str
    host: str
    arq_uuids: list[str]
    deadline: datetime.datetime


def stored_deadline(deadline: datetime.datetime) -> datetime.datetime:
    """``deadline`` as the database keeps it: rounded up to the whole second."""
    if deadline.microsecond == 0:
        return deadline
    return deadline.replace(microsecond=0) + datetime.timedelta(seconds=1)


# What a newer request of the instance replaces in its row.
_REPLACED = ("token", "host", "arq_uuids", "deadline", "updated_at")


def _upsert(dialect: str) -> Insert:
    """An INSERT that replaces the wait of an instance that has one (PostgreSQL and SQLite
    say it ON CONFLICT, MySQL and MariaDB ON DUPLICATE KEY UPDATE)."""
    if dialect == "mysql":
        stmt = mysql.insert(_bw)
        return stmt.on_duplicate_key_update({c: stmt.inserted[c] for c in _REPLACED})
    stmt = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}[dialect](_bw)
    return stmt.on_conflict_do_update(index_elements=[_bw.c.instance_uuid],
                                      set_={c: stmt.excluded[c] for c in _REPLACED})


# by dialect name (SQLAlchemy's for MariaDB through a mysql:// URL is "mysql")
_UPSERT = {dialect: _upsert(dialect) for dialect in ("mysql", "postgresql", "sqlite")}
_UPSERT["mariadb"] = _UPSERT["mysql"]


def _row(wait: Wait, now: datetime.datetime) -> dict[str, Any]:
    return {"instance_uuid": wait.instance, "token": wait.token, "host": wait.host,
            "arq_uuids": json.dumps(list(wait.arq_uuids)),
            "deadline": stored_deadline(wait.deadline), "created_at": now, "updated_at": now}


# (the parameters of an UPDATE may not take its columns' names)
_EXTEND = update(_bw).where(_bw.c.instance_uuid == bindparam("instance"),
                            _bw.c.token == bindparam("of_token")) \
    .values(deadline=bindparam("to_deadline"), updated_at=bindparam("now"))
_TAKE = delete(_bw).where(_bw.c.instance_uuid == bindparam("instance"),
                          _bw.c.token == bindparam("of_token"))
_FORGET = delete(_bw).where(_bw.c.token == bindparam("of_token"))
_WAITS = select(_bw.c.instance_uuid, _bw.c.token, _bw.c.host, _bw.c.arq_uuids, _bw.c.deadline)
_OVERDUE = _WAITS.where(_bw.c.deadline <= bindparam("now")).order_by(_bw.c.deadline, _bw.c.id)
_FIND = _WAITS.where(_bw.c.instance_uuid == bindparam("instance"))


def _wait(row: Any) -> Wait:
    return Wait(row.instance_uuid, row.token, row.host, json.loads(row.arq_uuids),
                row.deadline)


@_retry_on_deadlock
def expect(db: Database, waits: Iterable[Wait]) -> None:
    """Nova waits on these instances: each one's wait written, replacing an older one."""
    now = m.utcnow()
    rows = [_row(wait, now) for wait in waits]
    if not rows:
        return
    upsert = _UPSERT[db.dialect]
    with db.autocommit(write=True) as conn:
        if len(rows) == 1:          # a request binds one instance (Nova's)
            conn.execute(upsert, rows[0])
        else:                       # one statement too: its VALUES have a row each
            conn.execute(upsert.values(rows))


@_retry_on_deadlock
def extend(db: Database, instance: str, token: str, deadline: datetime.datetime) -> bool:
    """Moves the deadline of ``instance``'s wait of request ``token``; False: none."""
    with db.autocommit(write=True) as conn:
        return conn.execute(_EXTEND, {"instance": instance, "of_token": token,
                                      "to_deadline": stored_deadline(deadline),
                                      "now": m.utcnow()}).rowcount == 1


@_retry_on_deadlock
def take(db: Database, instance: str, token: str) -> bool:
    """Ends ``instance``'s wait of request ``token``. True only for the one caller whose
    DELETE removed the row: that caller alone tells Nova."""
    with db.autocommit(write=True) as conn:
        return conn.execute(_TAKE, {"instance": instance, "of_token": token}).rowcount == 1


@_retry_on_deadlock
def forget(db: Database, token: str) -> int:
    """Drops the waits of request ``token`` (refused), not a newer request's; how many."""
    with db.autocommit(write=True) as conn:
        return conn.execute(_FORGET, {"of_token": token}).rowcount


def overdue(db: Database, now: datetime.datetime) -> list[Wait]:
    """The waits whose deadline is ``now`` (naive UTC) or earlier, the oldest first."""
    with db.autocommit(write=False) as conn:
        return [_wait(row) for row in conn.execute(_OVERDUE, {"now": now})]


def find(db: Database, instance: str) -> Wait | None:
    """``instance``'s wait, whichever conductor wrote it; None: Nova waits on nothing."""
    with db.autocommit(write=False) as conn:
        row = conn.execute(_FIND, {"instance": instance}).first()
    return None if row is None else _wait(row)

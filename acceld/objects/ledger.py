"""The allocation ledger: who held which device, from when to when (docs/ledger.md).

One append-only row per change of who holds a device: an ARQ's bind (its handle
claimed) and unbind (its handle freed: unbind, failed bind, delete), a hot plug's attach
and detach, a v1 accelerator's attach and detach. Each is written by the statement batch
of the change itself, in its transaction: a change that rolls back leaves no row, and
no row is written without its change. Rows are never updated; only the retention purge
(:func:`purge`) deletes them, oldest first.

Device-hours (:func:`usage`) pair each holding row (``bind``, ``attach``) with the next
row of the same holding (same device and ARQ; for a v1 attachment, the device) that ends
it (``unbind``, ``detach``); an unpaired one is open and counts up to ``until``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, exists, func, insert, select

from acceld.db import models as m
from acceld.db import paging
from acceld.db.api import Database

_led = m.LedgerEntry.__table__

# Events: a holding begins with one of STARTS and ends with one of ENDS. Other events
# (a health or quarantine line) are kept and listed, but hold nothing.
BIND, UNBIND, ATTACH, DETACH = "bind", "unbind", "attach", "detach"
STARTS = frozenset({BIND, ATTACH})
ENDS = frozenset({UNBIND, DETACH})
# Kinds: what held the device.
KIND_ARQ = "arq"                    # a v2 ARQ bound by Nova (or any PATCH bind)
KIND_HOT_PLUG = "hot_plug"          # a v2 ARQ attached live (docs/hot-plug.md)
KIND_ACCELERATOR = "accelerator"    # a whole v1 accelerator attached to an instance or host
# ``to_state`` of the line an ARQ's delete writes when it frees a handle
DELETED = "Deleted"

# What usage may be summed by (group_by), and the column each names.
_GROUP_COLUMN = {"project": "project_id", "device": "device_uuid", "host": "host",
                 "instance": "instance_uuid"}

# What a row carries besides ``id``, in the table's order.
COLUMNS = tuple(c.name for c in _led.columns if c.name != "id")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One ledger line for :func:`record`; ``at`` None: now (naive UTC)."""

    event: str
    kind: str
    device_uuid: str
    deployable_uuid: str | None = None
    attach_handle_uuid: str | None = None
    arq_uuid: str | None = None
    instance_uuid: str | None = None
    host: str | None = None
    project_id: str | None = None
    user_id: str | None = None
    from_state: str | None = None
    to_state: str | None = None
    detail: str | None = None
    at: datetime.datetime | None = None


_INSERT = insert(_led)


def record(conn: Connection, *entries: Entry) -> None:
    """Writes ``entries`` with ``conn``, in the caller's transaction (one INSERT, of one
    row or many): the one way in for code that changes who holds a device, or that adds
    a line of its own kind (a health or quarantine step). A Session's ``connection()``
    is a Connection of its transaction."""
    if not entries:
        return
    now = m.utcnow()
    conn.execute(_INSERT, [dict(dataclasses.asdict(e), at=e.at or now) for e in entries])


def insert_from(select_stmt: Any) -> Any:
    """An ``INSERT INTO ledger (...) SELECT ...`` of ``select_stmt``, whose columns are
    labelled with :data:`COLUMNS` names (any subset but ``id``): for a change whose rows
    the ledger line is read from, so that it costs no read of its own."""
    return insert(_led).from_select(list(select_stmt.selected_columns.keys()), select_stmt)


# -- reads ------------------------------------------------------------------------------------

def _to_dict(row: Any) -> dict[str, Any]:
    return {"id": row.row_id, **{c: getattr(row, c) for c in COLUMNS}}


_ROWS = select(*(_led.c[c] for c in COLUMNS)).order_by(_led.c.id)


def list_entries(db: Database, *, project_id: str | None = None,
                 device_uuid: str | None = None, arq_uuid: str | None = None,
                 since: datetime.datetime | None = None,
                 until: datetime.datetime | None = None,
                 limit: int | None = None, marker: int | None = None) -> paging.Listing:
    """Ledger rows in id order (``acceld.db.paging``), a page after id ``marker``;
    ``since``/``until``: ``at`` in ``[since, until)``."""
    stmt = _ROWS
    for column, value in (("project_id", project_id), ("device_uuid", device_uuid),
                          ("arq_uuid", arq_uuid)):
        if value is not None:
            stmt = stmt.where(_led.c[column] == value)
    if since is not None:
        stmt = stmt.where(_led.c.at >= since)
    if until is not None:
        stmt = stmt.where(_led.c.at < until)
    stmt = paging.keyset(stmt, _led.c.id)

    def read(after: int, n: int) -> tuple[list[dict[str, Any]], int | None]:
        with db.rows() as conn:
            rows = conn.execute(stmt, {"after": after, "n": n}).all()
        return [_to_dict(r) for r in rows], paging.last_id(rows)

    return paging.Listing(read, after=marker or 0, limit=limit)


# Each holding or ending row with the next row of its holding (same device and ARQ, in id
# order): a window function, so that a holding is paired in the database, in one read.
_HOLDING_ROWS = (select(_led.c.id, _led.c.at, _led.c.event, _led.c.device_uuid,
                        _led.c.arq_uuid, _led.c.project_id, _led.c.host,
                        _led.c.instance_uuid,
                        func.lead(_led.c.at, type_=_led.c.at.type).over(
                            partition_by=(_led.c.device_uuid, _led.c.arq_uuid),
                            order_by=_led.c.id).label("ended_at"))
                 .where(_led.c.event.in_(sorted(STARTS | ENDS)),
                        _led.c.at < bindparam("until")))


def _holdings(project_id: str | None) -> Any:
    rows = _HOLDING_ROWS
    if project_id is not None:
        rows = rows.where(_led.c.project_id == project_id)
    held = rows.subquery("held")
    return (select(held).where(held.c.event.in_(sorted(STARTS)),
                               (held.c.ended_at.is_(None))
                               | (held.c.ended_at > bindparam("since")))
            .order_by(held.c.id))


def usage(db: Database, *, since: datetime.datetime, until: datetime.datetime,
          project_id: str | None = None, group_by: str = "project") -> list[dict[str, Any]]:
    """Device-hours held in ``[since, until)`` (naive UTC), per ``group_by`` value
    (project, device, host or instance), of ``project_id`` or all projects: each holding
    clipped to the window, an open one counted up to ``until``. Sorted by the group's
    value."""
    with db.rows() as conn:
        rows = conn.execute(_holdings(project_id), {"since": since, "until": until})
        return summarize(rows, since=since, until=until, group_by=group_by)


def summarize(rows: Iterable[Any], *, since: datetime.datetime, until: datetime.datetime,
              group_by: str) -> list[dict[str, Any]]:
    """The sums of :func:`usage` from holding rows (``at``, ``ended_at``, and the
    group's column); pure."""
    column = _GROUP_COLUMN[group_by]
    sums: dict[Any, list[float]] = {}
    for row in rows:
        begin = max(row.at, since)
        end = min(row.ended_at or until, until)
        if end <= begin:
            continue
        entry = sums.setdefault(getattr(row, column), [0.0, 0])
        entry[0] += (end - begin).total_seconds()
        entry[1] += 1
    return [{group_by: key, "device_hours": round(seconds / 3600, 6), "holdings": count}
            for key, (seconds, count) in sorted(sums.items(), key=lambda kv: str(kv[0]))]


# -- retention --------------------------------------------------------------------------------

_later = _led.alias("later")
# A holding still open (no later row of its device and ARQ) keeps its first row at any
# age: purging it would lose the hours it still counts.
_OPEN = and_(_led.c.event.in_(sorted(STARTS)), ~exists().where(
    _later.c.device_uuid == _led.c.device_uuid,
    _later.c.arq_uuid.is_not_distinct_from(_led.c.arq_uuid), _later.c.id > _led.c.id))
_OLDEST = (select(_led.c.id).where(_led.c.at < bindparam("before"), ~_OPEN)
           .order_by(_led.c.id).limit(bindparam("n")))
_DELETE = delete(_led).where(_led.c.id.in_(bindparam("ids", expanding=True)))


def purge(db: Database, before: datetime.datetime, batch: int = 1000) -> int:
    """Deletes at most ``batch`` rows older than ``before`` (oldest first; not the first
    row of a holding still open) in one transaction; the count. Idempotent: conductors
    purging together delete each row once (a row another deleted is not counted)."""
    with db.write_rows() as conn:
        ids = list(conn.execute(_OLDEST, {"before": before, "n": batch}).scalars())
        if not ids:
            return 0
        return conn.execute(_DELETE, {"ids": ids}).rowcount

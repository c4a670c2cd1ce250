"""Lists read in keyset batches, so that a list of any length is served in bounded memory.

A list query orders its rows by primary key and is read ``n`` rows at a time, each batch
one statement ``... WHERE id > :after ORDER BY id LIMIT :n`` that starts after the last id
of the batch before (:func:`keyset`). No connection or transaction is held between
batches, and no batch reads more than ``n`` rows, on every backend and driver (a server-side
cursor would hold a connection and a snapshot for as long as a slow client reads, and
pymysql's default cursor buffers the whole result anyway).

A :class:`Listing` reads its first batch when it is made, which is where anything that can
fail (an unknown marker, the database being down) fails, before an answer has started;
the list is then either complete in that batch (nearly always: it is rendered and sent as
one body, as before) or goes on in later batches read as the answer is sent
(:meth:`Listing.rest`). A page (``limit``) is one batch of ``limit + 1`` rows: the extra
row says whether there is a next page.

The batches are separate statements, so a list read across several sees each row at most
once (ids only grow) but not one snapshot: a row written while the list is sent may or
may not be in it, as with paging.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import bindparam, select

from acceld import exception

# rows per batch: a few hundred KiB of JSON for the widest rows (ARQs, deployables)
BATCH = 500

Item = dict[str, Any]
# ``read(after, n)``: at most ``n`` items whose id is greater than ``after``, in id order,
# and the id of the last one (None when there is none)
Read = Callable[[int, int], tuple[list[Item], int | None]]


def keyset(stmt: Any, id_column: Any) -> Any:
    """``stmt`` (ordered by ``id_column``) limited to one batch: rows whose id is greater
    than the ``after`` parameter, at most the ``n`` parameter of them. The id is added to
    the result as ``row_id``."""
    return (stmt.add_columns(id_column.label("row_id"))
            .where(id_column > bindparam("after")).limit(bindparam("n")))


def last_id(rows: list[Any]) -> int | None:
    """The ``row_id`` of the last of ``rows`` (from a :func:`keyset` statement)."""
    return rows[-1].row_id if rows else None


class Listing:
    """One list, or one page of it, read in batches of ``batch`` rows after id ``after``.

    ``items`` holds the first batch (for a page: the page). ``complete``: nothing follows
    ``items`` (for a page: there is no next page); otherwise :meth:`rest` reads the
    following batches, one statement each, as it is iterated, with ``rest`` (by default
    ``read``).
    """

    __slots__ = ("_rest", "_batch", "_last", "items", "complete", "limit")

    def __init__(self, read: Read, *, after: int = 0, limit: int | None = None,
                 batch: int = BATCH, rest: Read | None = None) -> None:
        self._rest, self._batch, self.limit = rest or read, batch, limit
        if limit is None:
            self.items, self._last = read(after, batch)
            self.complete = len(self.items) < batch
        else:
            items, _ = read(after, limit + 1)
            self.complete = len(items) <= limit
            self.items, self._last = items[:limit], None

    def rest(self) -> Iterator[list[Item]]:
        """The batches after ``items`` (none when complete, or for a page), each read
        when the one before has been consumed."""
        if self.complete or self.limit is not None:
            return
        read, after = self._rest, self._last
        while after is not None:
            items, after = read(after, self._batch)
            if items:
                yield items
            if len(items) < self._batch:
                return

    def __iter__(self) -> Iterator[Item]:
        """Every item: ``items``, then those of :meth:`rest`."""
        yield from self.items
        for batch in self.rest():
            yield from batch


def listing(connect: Callable[[], AbstractContextManager[Any]], stmt: Any,
            to_items: Callable[[Any, Sequence[Any]], list[Item]], *, table: Any, what: str,
            where: Sequence[Any] = (), params: dict[str, Any] | None = None,
            limit: int | None = None, marker: str | None = None) -> Listing:
    """The :class:`Listing` of a :func:`keyset` statement ``stmt`` (with ``params``), each
    batch read on its own ``connect()`` connection and made items by ``to_items(conn,
    rows)``; a page of ``limit`` after ``marker``, a uuid of ``table`` (with ``where``)
    looked up on one more connection (:func:`marker_id`)."""
    def read(after: int, n: int) -> tuple[list[Item], int | None]:
        with connect() as conn:
            rows = conn.execute(stmt, {**(params or {}), "after": after, "n": n}).all()
            return to_items(conn, rows), last_id(rows)

    after = 0
    if marker is not None:
        with connect() as conn:
            after = marker_id(conn, table, marker, what, *where)
    return Listing(read, after=after, limit=limit)


def each(to_item: Callable[[Any], Item]) -> Callable[[Any, Sequence[Any]], list[Item]]:
    """``to_items`` for :func:`listing` that makes each row an item by itself."""
    return lambda _conn, rows: [to_item(row) for row in rows]


def marker_id(conn: Any, table: Any, uuid: str, what: str, *where: Any) -> int:
    """The id of the row of ``table`` (with ``where``) whose uuid is ``uuid``: where a page
    starts after. InvalidInput naming the marker when there is none."""
    found = conn.execute(select(table.c.id).where(table.c.uuid == uuid, *where)).scalar()
    if found is None:
        raise exception.InvalidInput(f"marker {uuid} is not {what}.")
    return found

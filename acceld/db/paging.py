"""Lists read in keyset batches, so that a list of any length is served in bounded memory.

Each batch is one statement ``... WHERE id > :after ORDER BY id LIMIT :n`` (:func:`keyset`);
no connection is held between batches (a server-side cursor would hold one, and a
snapshot, for as long as a slow client reads). A :class:`Listing` reads its first batch
when made, so what can fail fails before the answer starts; a page (``limit``) is one
batch of ``limit + 1`` rows, the extra one telling whether a next page exists. A list
read across batches sees each row at most once, but not one snapshot.
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
    """``stmt`` limited to the ``n`` rows after id ``after``, with the id as ``row_id``."""
    return (stmt.add_columns(id_column.label("row_id"))
            .where(id_column > bindparam("after")).limit(bindparam("n")))


def last_id(rows: list[Any]) -> int | None:
    """The ``row_id`` of the last of ``rows`` (from a :func:`keyset` statement)."""
    return rows[-1].row_id if rows else None


class Listing:
    """A list or page read in batches after id ``after``: ``items``, then :meth:`rest`."""

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
        """The batches after ``items`` (none for a page), each read when needed."""
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
    """The :class:`Listing` of a :func:`keyset` ``stmt``, a page after uuid ``marker``."""
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
    """The id of ``table``'s row (with ``where``) of ``uuid``, or InvalidInput."""
    found = conn.execute(select(table.c.id).where(table.c.uuid == uuid, *where)).scalar()
    if found is None:
        raise exception.InvalidInput(f"marker {uuid} is not {what}.")
    return found

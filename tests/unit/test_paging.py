"""acceld.db.paging.Listing over a reader of an in-memory table: every item once, in
order, a batch per read, and pages that end where the rows end."""

from __future__ import annotations

import pytest

from acceld.db import paging

BATCH = 3


class Table:
    """Rows with ids 1..n (some skipped, as after deletes); records each read."""

    def __init__(self, n: int) -> None:
        self.ids = [i for i in range(1, 2 * n + 1) if i % 2]     # gaps between ids
        self.reads: list[tuple[int, int]] = []

    def read(self, after: int, n: int) -> tuple[list[paging.Item], int | None]:
        self.reads.append((after, n))
        rows = [i for i in self.ids if i > after][:n]
        return [{"uuid": f"u{i}", "id": i} for i in rows], (rows[-1] if rows else None)


@pytest.mark.parametrize("n", [0, 1, BATCH - 1, BATCH, BATCH + 1, 2 * BATCH, 2 * BATCH + 2])
def test_every_item_once_in_order_one_read_per_batch(n):
    table = Table(n)
    found = paging.Listing(table.read, batch=BATCH)
    assert found.complete == (n < BATCH)
    assert len(found.items) == min(n, BATCH)
    assert len(table.reads) == 1                  # only the first batch before iterating
    assert [item["id"] for item in found] == table.ids
    # a batch per read; a full last batch costs one more read, which finds nothing
    assert len(table.reads) == n // BATCH + 1
    assert all(size == BATCH for _, size in table.reads)


@pytest.mark.parametrize(("n", "limit"), [(0, 2), (2, 2), (3, 2), (5, 5), (6, 5)])
def test_a_page_reads_one_more_row_to_know_whether_another_follows(n, limit):
    table = Table(n)
    page = paging.Listing(table.read, limit=limit)
    assert table.reads == [(0, limit + 1)]
    assert [item["id"] for item in page.items] == table.ids[:limit]
    assert page.complete == (n <= limit)
    assert list(page.rest()) == [] and [i["id"] for i in page] == table.ids[:limit]


def test_after_and_a_reader_of_its_own_for_the_later_batches():
    table, later = Table(10), Table(10)
    found = paging.Listing(table.read, after=5, batch=BATCH, rest=later.read)
    assert [i["id"] for i in found] == [i for i in table.ids if i > 5]
    assert table.reads == [(5, BATCH)] and later.reads[0] == (11, BATCH)

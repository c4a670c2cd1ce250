"""Response bodies of the inventory lists (the hottest reads), kept per API process and
never stale: each is filed under the inventory generation read *before* its rows, and
while the generation in the database is unchanged no transaction has written those tables.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

# environ key: (view, generation) of a body served from ListCache
ENV_GENERATION = "acceld.generation"
# the longest body either store keeps: small lists are kept, long ones are read again
MAX_BODY = 4 * 1024 * 1024
# view, generation, the policy rules the handler checked, status line, headers, body
Answer = tuple[str, int, tuple[str, ...], str, list[tuple[str, str]], bytes]


class _Store:
    """Entries by key, each ending with a body, bounded: a body over :data:`MAX_BODY` is
    never filed, and a store that would pass a bound is emptied first."""

    MAX_ENTRIES = 256
    MAX_BYTES = 64 * 1024 * 1024

    def __init__(self) -> None:
        self._entries: dict[Hashable, Any] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def _file(self, key: Hashable, entry: Any, newer: Callable[[Any], bool]) -> None:
        """File ``entry`` unless the one filed is ``newer`` (of a newer generation)."""
        size = len(entry[-1])
        if size > MAX_BODY:
            return
        with self._lock:
            current = self._entries.get(key)
            if current is not None and newer(current):
                return
            if current is not None:
                self._bytes -= len(current[-1])
            elif (len(self._entries) >= self.MAX_ENTRIES
                  or self._bytes + size > self.MAX_BYTES):
                self._entries.clear()
                self._bytes = 0
            self._entries[key] = entry
            self._bytes += size


class ListCache(_Store):
    """Bodies by key, each filed under a generation (see the module's doc); a streamed
    list (``acceld.api.listing``) has no body to file."""

    def get(self, key: Hashable, generation: int | None) -> bytes | None:
        entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] == generation else None

    def put(self, key: Hashable, generation: int | None, body: bytes) -> None:
        if generation is not None:
            self._file(key, (generation, body), lambda current: current[0] > generation)


class Replies(_Store):
    """Whole 200 answers of those lists, filed by the router under every input they depend
    on with the generation and the policy rules checked, served after the same checks."""

    def get(self, key: Hashable) -> Answer | None:
        return self._entries.get(key)

    def put(self, key: Hashable, answer: Answer) -> None:
        self._file(key, answer,
                   lambda current: current[0] == answer[0] and current[1] > answer[1])

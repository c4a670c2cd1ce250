"""Response bodies of the inventory lists, kept per API process and never stale.

``GET /v2/devices`` and ``GET /v2/deployables`` are the hottest reads and change rarely
(an agent's report that changes something, an operator's enable/disable, an attribute).
Each body is filed under the inventory generation read *before* its rows
(``acceld.db.generations``): while the generation in the database is unchanged, no
transaction has written those tables since, so the stored bytes are exactly what a
fresh query would render. A request therefore costs one primary-key read instead of the
list query and its JSON encoding. Bounded; a changed generation replaces the entry.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

# environ key: (view, generation) of a body served from ListCache
ENV_GENERATION = "acceld.generation"
# the longest body either store keeps: small lists are kept, long ones are read again
MAX_BODY = 4 * 1024 * 1024
# view, generation, the policy rules the handler checked, status line, headers, body
Answer = tuple[str, int, tuple[str, ...], str, list[tuple[str, str]], bytes]


class _Store:
    """Entries by key, each holding a body, bounded in entries and in the bytes of their
    bodies: a body over :data:`MAX_BODY` is never filed, and a store that would pass a
    bound is emptied first (many distinct requests: start over, stay small)."""

    MAX_ENTRIES = 256
    MAX_BYTES = 64 * 1024 * 1024

    def __init__(self) -> None:
        self._entries: dict[Hashable, Any] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def _body(entry: Any) -> bytes:
        raise NotImplementedError

    @staticmethod
    def _newer(current: Any, entry: Any) -> bool:
        """Whether ``current`` (filed) is of a newer generation than ``entry``."""
        raise NotImplementedError

    def _file(self, key: Hashable, entry: Any) -> None:
        size = len(self._body(entry))
        if size > MAX_BODY:
            return
        with self._lock:
            current = self._entries.get(key)
            if current is not None and self._newer(current, entry):
                return      # a slower request that read an older generation
            if current is not None:
                self._bytes -= len(self._body(current))
            elif (len(self._entries) >= self.MAX_ENTRIES
                  or self._bytes + size > self.MAX_BYTES):
                self._entries.clear()
                self._bytes = 0
            self._entries[key] = entry
            self._bytes += size


class ListCache(_Store):
    """Bodies by key, each filed under a generation (see the module's doc), bounded as
    :class:`_Store` is: a long page is never filed, and a streamed list
    (``acceld.api.listing``) has no body to file."""

    @staticmethod
    def _body(entry: tuple[int, bytes]) -> bytes:
        return entry[1]

    @staticmethod
    def _newer(current: tuple[int, bytes], entry: tuple[int, bytes]) -> bool:
        return current[0] > entry[0]

    def get(self, key: Hashable, generation: int | None) -> bytes | None:
        """The body filed for ``key`` at ``generation``, or None."""
        if generation is None:
            return None
        entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] == generation else None

    def put(self, key: Hashable, generation: int | None, body: bytes) -> None:
        """Files ``body`` for ``key`` at ``generation`` (None: nothing is filed) unless one
        of a newer generation is there."""
        if generation is not None:
            self._file(key, (generation, body))


class Replies(_Store):
    """Whole answers of those lists, by everything of the request they depend on.

    A cached list still costs the pipeline in front of :class:`ListCache`: routing,
    microversion negotiation, the handler, its policy check, its query validation. Those
    are functions of the request's method, path, query string, microversion header, host
    (the links) and the caller's credentials, so the router files the finished answer
    (status line, headers, body) under exactly those, with the generation the body was
    filed under and the policy rules the handler checked. A later request with the same
    inputs gets the stored answer after the same checks a handler makes first: each rule
    is asked again for this caller (policy decisions are themselves cached, and policy
    file changes are picked up as for every request), and the generation must be
    unchanged. Only 200 answers of handlers that served from :class:`ListCache` are
    filed. Bounded as :class:`_Store` is (the bodies are mostly ListCache's own bytes objects,
    but an answer keeps its body alive after ListCache dropped it).
    """

    @staticmethod
    def _body(entry: Answer) -> bytes:
        return entry[5]

    @staticmethod
    def _newer(current: Answer, entry: Answer) -> bool:
        return current[0] == entry[0] and current[1] > entry[1]

    def get(self, key: Hashable) -> Answer | None:
        return self._entries.get(key)

    def put(self, key: Hashable, answer: Answer) -> None:
        """File ``answer`` unless one of a newer generation of its view is there, or its
        body is over :data:`MAX_BODY`."""
        self._file(key, answer)

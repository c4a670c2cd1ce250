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

# environ key: (view, generation) of a body served from ListCache
ENV_GENERATION = "acceld.generation"
# the longest body either store keeps: small lists are kept, long ones are read again
MAX_BODY = 4 * 1024 * 1024
# view, generation, the policy rules the handler checked, status line, headers, body
Answer = tuple[str, int, tuple[str, ...], str, list[tuple[str, str]], bytes]


class ListCache:
    """Bodies by key, each filed under a generation (see the module's doc). Bounded in
    entries and bytes; a body over :data:`MAX_BODY` (a long page) is never filed, and a
    streamed list (``acceld.api.listing``) has no body to file."""

    MAX_ENTRIES = 256
    MAX_BYTES = 64 * 1024 * 1024

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[int, bytes]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, generation: int | None) -> bytes | None:
        """The body filed for ``key`` at ``generation``, or None."""
        if generation is None:
            return None
        entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] == generation else None

    def put(self, key: Hashable, generation: int | None, body: bytes) -> None:
        """Files ``body`` for ``key`` at ``generation`` (None: nothing is filed) unless one
        of a newer generation is there."""
        if generation is None or len(body) > MAX_BODY:
            return
        with self._lock:
            current = self._entries.get(key)
            if current is not None and current[0] > generation:
                return
            if current is not None:
                self._bytes -= len(current[1])
            elif (len(self._entries) >= self.MAX_ENTRIES
                  or self._bytes + len(body) > self.MAX_BYTES):
                self._entries.clear()      # many distinct filters: start over, stay small
                self._bytes = 0
            self._entries[key] = (generation, body)
            self._bytes += len(body)


class Replies:
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
    filed. Bounded like ListCache.
    """

    MAX_ENTRIES = 256
    # the bodies are mostly ListCache's own bytes objects, but an answer keeps its body
    # alive after ListCache dropped it: a bound on what they may add up to
    MAX_BYTES = 64 * 1024 * 1024

    def __init__(self) -> None:
        self._entries: dict[Hashable, Answer] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Answer | None:
        return self._entries.get(key)

    def put(self, key: Hashable, answer: Answer) -> None:
        """File ``answer`` unless one of a newer generation of its view is there, or its
        body is over :data:`MAX_BODY`."""
        size = len(answer[5])
        if size > MAX_BODY:
            return
        with self._lock:
            current = self._entries.get(key)
            if current is not None and current[0] == answer[0] and current[1] > answer[1]:
                return      # a slower request that read an older generation
            if current is not None:
                self._bytes -= len(current[5])
            elif (len(self._entries) >= self.MAX_ENTRIES
                  or self._bytes + size > self.MAX_BYTES):
                self._entries.clear()      # many distinct requests: start over, stay small
                self._bytes = 0
            self._entries[key] = answer
            self._bytes += size

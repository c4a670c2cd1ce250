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
from collections.abc import Callable, Hashable

# environ key: (view, generation) of a body served from ListCache
ENV_GENERATION = "acceld.generation"
# view, generation, the policy rules the handler checked, status line, headers, body
Answer = tuple[str, int, tuple[str, ...], str, list[tuple[str, str]], bytes]


class ListCache:
    MAX_ENTRIES = 256

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[int, bytes]] = {}
        self._lock = threading.Lock()

    def body(self, key: Hashable, generation: int | None,
             render: Callable[[], bytes]) -> bytes:
        """The body for ``key`` at ``generation``: stored, or ``render()``-ed and stored
        (``generation`` None: rendered every time)."""
        if generation is None:
            return render()
        entry = self._entries.get(key)
        if entry is not None and entry[0] == generation:
            return entry[1]
        body = render()
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES and key not in self._entries:
                self._entries.clear()      # many distinct filters: start over, stay small
            current = self._entries.get(key)
            if current is None or current[0] <= generation:
                self._entries[key] = (generation, body)
        return body


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
        """File ``answer`` unless one of a newer generation of its view is there."""
        size = len(answer[5])
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

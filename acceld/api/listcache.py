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

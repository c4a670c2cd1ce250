"""UUID strings made and recognised without ``uuid.UUID`` objects (a visible cost), the
same as ``str(uuid.uuid4())`` and ``str(uuid.UUID(value))`` (tests/unit/test_uuids.py)."""

from __future__ import annotations

import os
import re
import uuid as uuidlib

# the form str(uuid.UUID(...)) gives: a value already in it needs no parsing
_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# the variant digit (10xx in binary) for a random hex digit's low two bits
_VARIANT = {f"{n:x}": "89ab"[n & 3] for n in range(16)}


def random_uuid() -> str:
    """A random (version 4) UUID in canonical form, as ``str(uuid.uuid4())``."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


def canonical(value: str) -> str | None:
    """``str(uuid.UUID(value))``, or None when ``value`` is not a UUID."""
    if _CANONICAL.fullmatch(value):
        return value
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        return None

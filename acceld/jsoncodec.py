"""JSON as ``json.dumps`` and ``json.loads`` write and read it, for per-request paths.

``json.dumps(value, default=...)`` builds a ``JSONEncoder`` on every call;
``json.loads(bytes)`` asks ``json.detect_encoding`` first. :func:`encoder` builds one
encoder, without the circular-reference check (the values written here are trees built
for one answer or row, so a cycle would be a bug, and ``RecursionError`` its symptom,
not ``ValueError``). ``tests/unit/test_api_responses.py`` holds both to the
``json`` module's output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


# NaN, Infinity and -Infinity (which json reads by default), and a number too large for
# a float (which it reads as infinity), are refused: no answer could write them back as
# JSON.
_DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_finite)

def encoder(default: Callable[[Any], Any] | None = None) -> Callable[[Any], str]:
    """A function writing what ``json.dumps(value, default=default)`` writes: one
    encoder built once, without the circular-reference check."""
    return json.JSONEncoder(default=default, check_circular=False).encode


def loads(data: bytes) -> Any:
    """``json.loads(data)``, stricter: the text must be valid UTF-8 (or UTF-16 or 32 as
    ``json.detect_encoding`` tells it; never an encoded surrogate), and NaN, Infinity
    and numbers beyond a float's range are refused. ValueError for anything refused.
    Data that starts as a JSON object or list does, with no NUL in its first four bytes,
    is UTF-8 by ``json.detect_encoding``'s rules (no BOM, not UTF-16 or 32): decoded here
    without asking it."""
    if data[:1] in (b"{", b"[") and b"\x00" not in data[:4]:
        return _DECODER.decode(data.decode("utf-8"))
    return _DECODER.decode(data.decode(json.detect_encoding(data)))

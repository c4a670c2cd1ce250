"""JSON as ``json.dumps`` and ``json.loads`` write and read it, for per-request paths.

``json.dumps(value)`` runs its Python wrapper and builds a C encoder on every call (and,
with ``default=``, a ``JSONEncoder`` too); ``json.loads(bytes)`` asks
``json.detect_encoding`` first. On a small write those are a visible part of the Python the
API runs. :func:`encoder` builds the C encoder once, without the circular-reference check
(its ``markers`` dict is the only state a call keeps; the values written here are trees
built for one answer or row, so a cycle would be a bug, and ``RecursionError`` its
symptom, not ``ValueError``). ``tests/unit/test_api_responses.py`` holds both to the
``json`` module's output.
"""

from __future__ import annotations

import json
import json.encoder
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
    """A function writing what ``json.dumps(value, default=default)`` writes."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:                # no C accelerator in this Python: json's own way
        python = json.JSONEncoder(default=default)
        return python.encode
    encode = make(None, default, json.encoder.encode_basestring_ascii, None, ": ", ", ",
                  False, False, True)

    def dumps(value: Any) -> str:
        return "".join(encode(value, 0))
    return dumps


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

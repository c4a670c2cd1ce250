"""JSON as ``json.dumps`` and ``json.loads`` write and read it, for per-request paths.

``json.dumps(value)`` runs its Python wrapper and builds a C encoder on every call (and,
with ``default=``, a ``JSONEncoder`` too); ``json.loads(bytes)`` asks
``json.detect_encoding`` first. On a small write those were a tenth of the Python the API
ran. :func:`encoder` builds the C encoder once, without the circular-reference check
(its ``markers`` dict is the only state a call keeps; the values written here are trees
built for one answer or row, so a cycle would be a bug, and ``RecursionError`` its
symptom, not ``ValueError``). ``tests/unit/test_api_responses.py`` holds both to the
``json`` module's output.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any

_DECODER = json.JSONDecoder()


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
    """``json.loads(data)``. Data that starts as a JSON object or list does, with no NUL
    in its first four bytes, is UTF-8 by ``json.detect_encoding``'s rules (no BOM, not
    UTF-16 or 32): decoded here without asking it."""
    if data[:1] in (b"{", b"[") and b"\x00" not in data[:4]:
        return _DECODER.decode(data.decode("utf-8", "surrogatepass"))
    return json.loads(data)

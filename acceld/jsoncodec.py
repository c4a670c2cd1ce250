"""``json.dumps`` and ``json.loads`` without their per-call costs (an encoder per call,
``json.detect_encoding``); tests/unit/test_api_responses.py holds both to ``json``'s."""

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
    """``json.dumps(value, default=default)``, built once, with no circular-reference check."""
    return json.JSONEncoder(default=default, check_circular=False).encode


def loads(data: bytes) -> Any:
    """``json.loads(data)``, stricter (ValueError): valid UTF-8/16/32 with no encoded
    surrogate, no NaN, Infinity or number beyond a float's range."""
    if data[:1] in (b"{", b"[") and b"\x00" not in data[:4]:   # UTF-8 by detect_encoding
        return _DECODER.decode(data.decode("utf-8"))
    return _DECODER.decode(data.decode(json.detect_encoding(data)))

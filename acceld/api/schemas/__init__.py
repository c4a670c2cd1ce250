"""JSON schemas (draft 2020-12) for every request body and query, one constant per variant.

A ``pattern`` ends the value with ``(?![\\s\\S])``, which Python's ``re`` and ECMA-262 read
alike (Python's ``$`` also matches before a final line feed).
"""

from __future__ import annotations

from typing import Any

from acceld import limits

END = r"(?![\s\S])"


def whole(regex: str) -> str:
    """A pattern the whole value must match."""
    return f"^(?:{regex}){END}"


def free_of(chars: str) -> str:
    """A pattern for a value holding none of ``chars`` (a character-class body)."""
    return whole(f"[^{chars}]*")


# the pattern of a name, and of free text (acceld.limits: NAME_FORBIDDEN, TEXT_FORBIDDEN)
NAME_CHARS = free_of(limits.NAME_FORBIDDEN)
TEXT_CHARS = free_of(limits.TEXT_FORBIDDEN)
# a name that is not only spaces
SHOWN_NAME_CHARS = rf"^(?![\s\S]*[{limits.NAME_FORBIDDEN}])\s*\S"


def name(max_length: int = limits.NAME_LENGTH, min_length: int = 1,
         pattern: str = NAME_CHARS) -> dict[str, Any]:
    """A string a user names something with."""
    return {"type": "string", "minLength": min_length, "maxLength": max_length,
            "pattern": pattern}


def closed(properties: dict[str, Any] | None = None, required: list[str] | None = None,
           **more: Any) -> dict[str, Any]:
    """An object with these ``properties`` (``required`` ones, ``more`` keywords) and no
    other field."""
    out: dict[str, Any] = {"type": "object"}
    if properties is not None:
        out["properties"] = properties
    if required:
        out["required"] = required
    return {**out, **more, "additionalProperties": False}


# a UUID as a request gives it: any case, hyphens optional (acceld.uuids.canonical)
UUID = {"type": "string", "format": "uuid",
        "pattern": whole("[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                         "[0-9a-fA-F]{12}")}

# a number stored as its text (where Cyborg takes a string or a number): integers within
# 64 bits, and no float that would not fit a float's text
NUMBER_AS_TEXT = {"type": "number", "minimum": -(2**63), "maximum": 2**63 - 1}
# a value of an integer column
INTEGER_ID = {"type": "integer", "minimum": 1, "maximum": limits.INT_MAX}

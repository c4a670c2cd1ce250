"""The API's fixed limits and character rules (docs/api-v1.md and api-v2.md list them):
what a row holds on every database (255 characters in a ``String(255)``, 65535 bytes in
a MariaDB ``TEXT``) and Placement's integer range."""

from __future__ import annotations

INT_MAX = 2**31 - 1             # Placement's and every acceld integer column's largest
NAME_LENGTH = 255               # a name, a host, a group key or value (Nova's, Placement's)
UUID_LENGTH = 36                # an ARQ bind's instance_uuid and device_rp_uuid (columns)
TEXT_LENGTH = 8192              # free text: a description, an attribute's key and value
STORED_JSON_BYTES = 65535       # JSON kept in one TEXT column
PROFILE_GROUPS = 32             # groups of one device profile
GROUP_KEYS = 64                 # keys of one group
QUERY_FIELDS = 32               # parameters of one query string
JSON_DEPTH = 32                 # levels of arrays and objects in a request body
PROFILE_ARQS = 64               # default of [api] max_arqs_per_profile

# Characters no name may hold: C0 and C1 controls, DEL, and the bidirectional overrides
# and isolates that reorder how the text around them is shown (U+202A-U+202E,
# U+2066-U+2069). Free text may also hold tab, line feed and carriage return, and the
# bidirectional controls (right-to-left prose needs them). NUL and lone surrogates are
# refused in every string before any schema (acceld.api.util).
# Both are the body of a regular-expression character class, in escapes that Python's
# ``re`` and ECMA-262 read alike.
NAME_FORBIDDEN = r"\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
TEXT_FORBIDDEN = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"

PREFIX = 40                     # how much of a refused value an error message repeats


def prefix(value: object, length: int = PREFIX) -> str:
    """``repr(value)`` cut to about ``length`` characters, for an error message."""
    text = repr(value)
    return text if len(text) <= length else f"{text[:length]}... ({len(text)} characters)"

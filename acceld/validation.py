"""JSON Schema validation, the one way acceld checks what it is given (API bodies and
queries, agents' reports, driver options, usage notifications, simulator scenarios).

A fastjsonschema-compiled check decides whether a document is valid (a report of eight
devices in 0.2 ms rather than jsonschema's 5 ms); jsonschema (draft 2020-12, formats
checked) words what is wrong with one that is not. Both are built once per schema
object: schemas are module constants.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import fastjsonschema
import jsonschema

from acceld import uuids


def _is_uuid(value: Any) -> bool:
    """The ``uuid`` format as jsonschema checks it: parses, hyphens in place."""
    if not isinstance(value, str):
        return True
    return uuids.canonical(value) is not None and \
        all(value[i] == "-" for i in (8, 13, 18, 23))


class _Compiled(NamedTuple):
    schema: dict[str, Any]
    full: jsonschema.protocols.Validator    # words the errors
    fast: Any                               # fastjsonschema's: decides validity


_COMPILED: dict[int, _Compiled] = {}


def _compiled(schema: dict[str, Any]) -> _Compiled:
    entry = _COMPILED.get(id(schema))
    if entry is None or entry.schema is not schema:
        if len(_COMPILED) > 512:
            _COMPILED.clear()
        entry = _COMPILED[id(schema)] = _Compiled(
            schema,
            jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()),
            fastjsonschema.compile(schema, formats={"uuid": _is_uuid}))
    return entry


def conforms(data: Any, schema: dict[str, Any]) -> bool:
    """Whether ``data`` is valid by ``schema``."""
    try:
        _compiled(schema).fast(data)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def problems(data: Any, schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    """What is wrong with ``data`` by ``schema`` (nothing when it is valid), for
    ``jsonschema.exceptions.best_match``."""
    if conforms(data, schema):
        return iter(())
    return _compiled(schema).full.iter_errors(data)


def first_problem(data: Any, schema: dict[str, Any]) -> str | None:
    """What is wrong with ``data`` at the smallest path (paths compared as lists: keys
    alphabetically, items by index), as ``"<where>: <what>"`` (``where`` the ``/``-joined
    path, ``<root>`` for the document itself), or None when it is valid; the same data
    always names the same problem."""
    errors = sorted(problems(data, schema), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    return f"{'/'.join(str(p) for p in errors[0].absolute_path) or '<root>'}: " \
        f"{errors[0].message}"

"""Rendering of API objects as prettytable tables (for people) or JSON (for scripts)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

import prettytable

Formatter = Callable[[Any], str]


def render_value(value: Any) -> str:
    """Render one cell: empty for None, compact JSON for dicts and lists."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def render_attached_to(value: Any) -> str:
    """Render ``attached_to`` as ``instance:<id>`` / ``host:<id>`` / empty."""
    if not value:
        return ""
    if isinstance(value, dict):
        return f"{value.get('type', '')}:{value.get('id', '')}"
    return str(value)


def print_json(data: Any, out: TextIO | None = None) -> None:
    """Print ``data`` as indented JSON."""
    stream = out or sys.stdout
    stream.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def print_list(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    fmt: str,
    formatters: dict[str, Formatter] | None = None,
    out: TextIO | None = None,
) -> None:
    """Print a list of objects: a table of ``columns`` or a JSON array of the objects."""
    items = list(rows)
    if fmt == "json":
        print_json(items, out)
        return
    formatters = formatters or {}
    table = prettytable.PrettyTable(list(columns))
    table.align = "l"
    for item in items:
        table.add_row(
            [formatters.get(col, render_value)(item.get(col)) for col in columns]
        )
    (out or sys.stdout).write(table.get_string() + "\n")


def print_object(
    obj: dict[str, Any],
    fmt: str,
    formatters: dict[str, Formatter] | None = None,
    out: TextIO | None = None,
) -> None:
    """Print one object: a Field/Value table or JSON."""
    if fmt == "json":
        print_json(obj, out)
        return
    formatters = formatters or {}
    table = prettytable.PrettyTable(["Field", "Value"])
    table.align = "l"
    for key in obj:
        table.add_row([key, formatters.get(key, render_value)(obj[key])])
    (out or sys.stdout).write(table.get_string() + "\n")

"""Rendering of API objects as prettytable tables (for people) or JSON (for scripts).
Text for a terminal goes through :func:`safe`, so a name or message cannot move the
cursor, recolour the screen or reorder what follows it; JSON output is exact JSON."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

import prettytable

Formatter = Callable[[Any], str]

# C0 controls, DEL and C1 controls; the bidi embeddings and overrides (U+202A-U+202E),
# isolates (U+2066-U+2069) and marks (U+200E, U+200F, U+061C); the line and paragraph
# separators (U+2028, U+2029).
_UNSAFE = [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A),
           0x200E, 0x200F, 0x061C, 0x2028, 0x2029]
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _UNSAFE}


def safe(text: str) -> str:
    """``text`` with every control, bidi and line-separator character escaped: one line."""
    return text.translate(_ESCAPES)


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


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _print_table(header: list[str], rows: Iterable[list[str]]) -> None:
    table = prettytable.PrettyTable(header)
    table.align = "l"
    for row in rows:
        table.add_row([safe(cell) for cell in row])
    sys.stdout.write(table.get_string() + "\n")


def print_list(rows: Iterable[dict[str, Any]], columns: Sequence[str], fmt: str,
               formatters: dict[str, Formatter] | None = None) -> None:
    """Print a list of objects: a table of ``columns`` (cells escaped) or a JSON array."""
    items = list(rows)
    if fmt == "json":
        return print_json(items)
    if fmt == "csv":
        return print_csv(items, columns)
    render = {col: (formatters or {}).get(col, render_value) for col in columns}
    _print_table(list(columns), ([render[col](item.get(col)) for col in columns] for item in items))


def print_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> None:
    """Print objects as CSV (RFC 4180, a header line of ``columns``): for spreadsheets and
    scripts, so the values are exact (quoted, not escaped)."""
    writer = csv.writer(sys.stdout, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([render_value(row.get(col)) for col in columns])


def print_object(obj: dict[str, Any], fmt: str) -> None:
    """Print one object: a Field/Value table (escaped) or JSON."""
    if fmt == "json":
        return print_json(obj)
    _print_table(["Field", "Value"], ([key, render_value(value)] for key, value in obj.items()))


def print_line(text: str, out: TextIO | None = None) -> None:
    """Print one line of text for people, escaped."""
    (out or sys.stdout).write(safe(text) + "\n")


def print_error(message: str) -> None:
    """Print ``ERROR: <message>`` as one escaped line on stderr."""
    print_line(f"ERROR: {message}", sys.stderr)


def print_progress(message: str) -> None:
    """Print one escaped progress line on stderr (stdout stays the command's result)."""
    print_line(message, sys.stderr)
    sys.stderr.flush()

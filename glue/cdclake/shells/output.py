"""Rows as the CLI prints them: an aligned text table, CSV, or JSON lines.

The three styles agree on values: NULL is ``NULL`` in a table, an empty unquoted field in CSV and
``null`` in JSON; the empty string is an empty cell, ``""`` and ``""``; booleans are ``true`` and
``false``; binary is PostgreSQL's bytea hex (``\\x...``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# CSV fields that must be quoted (PostgreSQL's COPY ... CSV rule): the delimiter, the quote and
# line breaks; and the empty string, so that it differs from NULL (an empty unquoted field).
_CSV_SPECIAL = (",", '"', "\n", "\r")


def printable(value: Any) -> Any:
    """A value as every format shows it: binary as PostgreSQL prints bytea (``\\x`` and hex)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    return value


def text_of(value: Any) -> str:
    """A non-NULL value as text in a table or CSV: booleans as ``true``/``false``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(printable(value))


def csv_field(value: Any) -> str:
    """One CSV field as PostgreSQL's ``COPY ... (FORMAT csv)`` writes it: NULL as an empty unquoted
    field, the empty string as ``""``, a value holding a comma, quote or line break quoted with
    its quotes doubled."""
    if value is None:
        return ""
    text = text_of(value)
    if text == "" or any(c in text for c in _CSV_SPECIAL):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_lines(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A header line and one line per row (``\\n`` line ends)."""
    return "".join(",".join(csv_field(v) for v in line) + "\n" for line in [list(columns), *rows])


def aligned_table(columns: Sequence[str], rows: Sequence[Sequence[str]], count: bool = True) -> str:
    """Text cells as a boxed table, each column as wide as its widest cell, and the row count."""
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def render(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    body = [line, render(columns), line, *[render(r) for r in rows], line]
    tail = f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n" if count else ""
    return "\n".join(body) + "\n" + tail


def format_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], style: str) -> str:
    """Render rows as an aligned text table, CSV, or JSON lines (one object per line, each ending
    with a newline)."""
    if style == "csv":
        return csv_lines(columns, rows)
    if style == "json":
        return "".join(
            json.dumps(dict(zip(columns, [printable(v) for v in row], strict=False)), default=str) + "\n"
            for row in rows
        )
    return aligned_table(columns, [[("NULL" if v is None else text_of(v)) for v in row] for row in rows])

"""Rows as the CLI prints them: an aligned text table, CSV, or JSON lines."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any


def printable(value: Any) -> Any:
    """A value as every format shows it: binary as PostgreSQL prints bytea (``\\x`` and hex)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    return value


def format_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], style: str) -> str:
    """Render rows as an aligned text table, CSV, or JSON lines (one object per line, each ending
    with a newline)."""
    rows = [[printable(v) for v in row] for row in rows]
    if style == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([["" if v is None else v for v in row] for row in rows])
        return out.getvalue()
    if style == "json":
        return "".join(json.dumps(dict(zip(columns, row, strict=False)), default=str) + "\n" for row in rows)
    text = [[("NULL" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in text]) for i, c in enumerate(columns)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def render(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    body = [line, render(columns), line, *[render(r) for r in text], line]
    return "\n".join(body) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})\n"

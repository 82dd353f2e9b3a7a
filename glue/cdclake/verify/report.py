"""``cdclake verify``'s report: a line a table with its differing keys and one summary line (``format_comparisons``),
one JSON document (``comparisons_json``), or a CSV row a table (``comparisons_csv``: the shell writes it)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from cdclake.verify.result import TableComparison


def comparisons_json(results: Sequence[TableComparison]) -> str:
    """Every table's comparison and the summary, as one JSON document."""
    tables = [r.as_json() for r in results]
    summary = {v: sum(1 for t in tables if t["verdict"] == v) for v in ("equal", "differing", "lagging", "skipped")}
    return json.dumps({"tables": tables, "summary": summary}, indent=2, default=str) + "\n"


_CSV_COLUMNS = (
    "table", "verdict", "problem", "source_rows", "silver_rows", "method", "how", "ranges", "ranges_differing",
    "rows_read", "source_position", "lag_resolved", "unconfirmed", "lagging", "lag_seconds",
)  # fmt: skip
_CSV_COUNTED = ("missing", "unexpected", "different", "default_not_in_silver")


def comparisons_csv(results: Sequence[TableComparison]) -> tuple[list[str], list[list[Any]]]:
    """``--format csv``'s header and rows: a row a table, its counts (the keys' lists are left to json)."""
    rows = []
    for result in results:
        values = result.as_json()
        rows.append([values[c] for c in _CSV_COLUMNS] + [len(values[c]) for c in _CSV_COUNTED])
    return [*_CSV_COLUMNS, *_CSV_COUNTED], rows


def format_comparisons(results: Sequence[TableComparison], show: int = 20) -> str:
    """One line per table, then up to ``show`` differing keys of each kind (a row whose content
    differs with the columns that differ), then one summary line: tables equal, differing, skipped."""
    lines = []
    for r in results:
        if r.problem:
            lines.append(f"SKIPPED {r.table}: {r.problem}")
            continue
        verdict = {"equal": "OK     ", "differing": "DIFFERS", "lagging": "LAGGING"}[r.verdict]
        differ = f"{r.differing_keys} row(s) differ; " if r.differing_keys else ""
        rows = f"source rows={r.source_rows} silver rows={r.silver_rows}"
        lines.append(f"{verdict} {r.table}: {differ}{rows} ({r.how()})")
        if r.lagging:
            lines.append(f"  silver had not caught up with the source ({r.position}) in time: {r.lagging}")
        if r.lag_resolved:
            lines.append(f"  {r.lag_resolved} key(s) differed only until silver caught up (lag, not reported)")
        if r.unconfirmed and not r.lagging:
            lines.append(f"  {r.unconfirmed} more key(s) kept changing at the source: not confirmed, not reported")
        different = [f"{k} (columns: {', '.join(r.differing_columns.get(k, ()))})" for k in r.different]
        for label, keys in (("missing from silver", r.missing), ("not at the source", r.unexpected),
                            ("content differs", different),
                            ("default not in silver (row older than an ADD COLUMN ... DEFAULT, not written since)",
                             r.unlogged_defaults)):  # fmt: skip
            for k in keys[:show]:
                lines.append(f"  {label}: {k}")
            if len(keys) > show:
                lines.append(f"  ... and {len(keys) - show} more {label}")
    count = Counter(r.verdict for r in results)
    lines.append(
        f"verify: {count['equal']} table(s) equal, {count['differing']} differing, "
        + (f"{count['lagging']} lagging, " if count["lagging"] else "")
        + f"{count['skipped']} skipped"
    )
    return "\n".join(lines) + "\n"

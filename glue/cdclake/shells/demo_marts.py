"""The demo's layer 3: refresh the example's marts and check each equals its SQL evaluated from scratch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdclake.gold.refresh import mart_table
from cdclake.gold.run import refresh_marts

if TYPE_CHECKING:
    from cdclake.context import Engine


def _sorted_rows(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows), key=repr)


def refresh_demo_marts(engine: Engine) -> None:
    """Refresh every configured mart and print what each refresh did."""
    for result in refresh_marts(engine):
        detail = f", {result.groups} group(s) recomputed" if result.groups is not None else ""
        reason = f" ({result.reason})" if result.reason else ""
        print(f"demo: gold mart {result.mart}: {result.outcome} {result.path or ''}{detail}{reason}")


def verify_demo_marts(engine: Engine) -> int:
    """Print each mart and its status; 0 when every mart equals its SQL evaluated from scratch over silver."""
    from cdclake.gold.status import mart_statuses
    from cdclake.shells.output import format_rows
    from cdclake.shells.status_view import compact_marts

    failures = 0
    for mart in engine.config.gold.marts:
        stored = engine.spark.table(mart_table(engine, mart).identifier)
        rows = _sorted_rows(stored.collect())
        print(format_rows(stored.columns, rows, "table"), end="")
        expected = _sorted_rows(engine.spark.sql(mart.sql).collect())  # the user's SQL, on silver as it is now
        if rows != expected:
            failures += 1
            print(f"demo: gold mart {mart.name} DIFFERS from its SQL evaluated from scratch:")
            for row in sorted(set(rows) ^ set(expected), key=repr):
                print(f"  {'mart only' if row in rows else 'SQL only'}: {row}")
        else:
            print(f"demo: gold mart {mart.name} equals its SQL evaluated from scratch ({len(rows)} rows): OK")
    print(compact_marts(mart_statuses(engine)), end="")
    return 1 if failures else 0

"""The ``cdclake gold`` command and the marts part of ``cdclake status`` (called by the CLI)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdclake.gold.refresh import FAILED
from cdclake.gold.run import refresh_marts

if TYPE_CHECKING:
    from cdclake.context import Engine


def gold_command(engine: Engine, names: Sequence[str] | None) -> int:
    """Refresh the marts (or those named); print one line each; exit code 1 when one failed."""
    marts = [engine.config.gold.mart(n) for n in names] if names else list(engine.config.gold.marts)
    if not marts:
        print("no marts configured (add a 'marts:' section to the configuration)")
        return 0
    results = refresh_marts(engine, marts)
    for result in results:
        detail = f" path={result.path}" if result.path else ""
        detail += f" groups={result.groups}" if result.groups is not None else ""
        detail += f" ({result.reason})" if result.reason else ""
        print(f"gold      {result.mart}: {result.outcome}{detail} {result.seconds:.1f}s")
    return 1 if any(r.outcome == FAILED for r in results) else 0


def mart_status_text(engine: Engine, style: str) -> str:
    """The marts' status in the ``status`` command's format ("" when no marts are configured)."""
    from cdclake.gold.status import mart_statuses, mart_statuses_as_rows
    from cdclake.shells.output import format_rows

    if not engine.config.gold.marts:
        return ""
    columns, rows = mart_statuses_as_rows(mart_statuses(engine))
    return format_rows(columns, rows, style)

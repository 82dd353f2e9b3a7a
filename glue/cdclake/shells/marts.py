"""The ``cdclake gold`` command (called by the CLI)."""

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

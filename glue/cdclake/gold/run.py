"""Refresh the marts: each on its own, one commit per mart; consistent marts at one source cut."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdclake.gold import refresh
from cdclake.gold.consistent import refresh_consistent
from cdclake.gold.refresh import MartRefresh, mart_table
from cdclake.mart_config import MartConfig

if TYPE_CHECKING:
    from cdclake.context import Engine


def refresh_mart(engine: Engine, mart: MartConfig) -> MartRefresh:
    """Refresh one mart; never raises for the mart's own problems (they are in the result)."""
    if mart.consistent:
        target = mart_table(engine, mart)
        return refresh_consistent(engine, mart, f"{target.database}.{target.name}", time.monotonic())
    return refresh.refresh_mart(engine, mart)


def refresh_marts(engine: Engine, marts: Sequence[MartConfig] | None = None) -> list[MartRefresh]:
    """Refresh ``marts`` (all configured ones by default), each on its own: one commit per mart."""
    chosen = list(engine.config.gold.marts if marts is None else marts)
    return [refresh_mart(engine, mart) for mart in chosen]

"""Marts computed as of one source commit time that every table they read has reached."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdclake.gold.refresh import MartRefresh
    from cdclake.gold.settings import MartConfig
    from cdclake.pipeline import Engine


def refresh_consistent(engine: Engine, mart: MartConfig, label: str, started: float) -> MartRefresh:
    from cdclake.gold.refresh import FAILED, MartRefresh

    return MartRefresh(label, FAILED, reason="consistent marts are not implemented yet")

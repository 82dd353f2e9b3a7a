"""The pure parts of the follow benchmarks (bench/freshness.py, bench/warm_cold.py)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench(name: str) -> ModuleType:
    """bench/ is a directory of scripts at the repository root, not part of the installed package:
    registered as the package ``bench`` so its modules' own ``from bench...`` imports resolve."""
    if "bench" not in sys.modules or not hasattr(sys.modules["bench"], "__path__"):
        spec = importlib.util.spec_from_file_location(
            "bench", BENCH / "__init__.py", submodule_search_locations=[str(BENCH)]
        )
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules["bench"] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"bench.{name}")


freshness = _bench("freshness")
warm_cold = _bench("warm_cold")


def test_percentiles_interpolate_between_closest_ranks() -> None:
    # GIVEN five lags WHEN their quantiles are taken THEN they interpolate linearly
    assert freshness.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert freshness.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    assert freshness.percentile([7.0], 0.95) == 7.0
    with pytest.raises(ValueError):
        freshness.percentile([], 0.5)


def test_run_follow_lines_are_grouped_into_rounds_by_when_they_arrived() -> None:
    # GIVEN two bursts of table lines from run --follow and a line that is not a table's
    def table(name: str, files: int, seconds: float) -> str:
        return (
            f"cdc       public.{name}: files={files} skipped=0 inserted=0 updated=3 deleted=0 ignored_late=0 "
            f"rows_quarantined=0 files_quarantined=0 {seconds:.1f}s"
        )

    lines = [
        (100.0, table("fresh_0", 1, 1.5)),
        (100.1, table("fresh_1", 2, 0.5)),
        (100.2, table("fresh_2", 1, 1.0)),
        (106.0, table("fresh_0", 1, 2.0)),
        (106.1, "follow ended (interrupted): 2 rounds, 5 files applied"),
    ]
    # WHEN they are grouped
    rounds = freshness.rounds_of(lines)
    # THEN each burst is one round, ending at its last line
    assert [(r["ended"], r["tables"], r["files"]) for r in rounds] == [(100.2, 3, 4), (106.0, 1, 1)]
    assert rounds[0]["table_seconds"] == pytest.approx(3.0)


def test_the_background_load_updates_the_benchmark_tables_and_never_the_marker_column() -> None:
    script = freshness.pgbench_script(freshness.FreshnessSettings(tables=30, rows=200))
    assert "random(0, 29)" in script and "random(1, 200)" in script
    assert "UPDATE fresh_:t SET" in script and freshness.table_name(29) == "fresh_29"
    assert " v =" not in script and " v=" not in script


def test_cold_and_warm_are_the_first_and_last_rounds_per_table_over_processes() -> None:
    runs = [
        {"session_seconds": 4.0, "round_seconds": [30.0, 20.0, 15.0]},
        {"session_seconds": 6.0, "round_seconds": [36.0, 18.0, 12.0]},
    ]
    summary = warm_cold.summarise(runs, tables=3)
    assert summary["cold_per_table"] == pytest.approx(11.0)
    assert summary["warm_per_table"] == pytest.approx(4.5)
    assert summary["saved_per_table"] == pytest.approx(6.5)
    assert summary["session_seconds"] == pytest.approx(5.0)

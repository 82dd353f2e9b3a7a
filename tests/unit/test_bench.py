"""The pure parts of the benchmark harness (bench/), so it cannot rot between `make bench` runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    """bench/ is a directory of scripts at the repository root, not part of the installed package."""
    spec = importlib.util.spec_from_file_location(f"bench.{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


report = _load("report")
generate = _load("generate")


def test_ratios_targets_and_the_generated_section() -> None:
    floor = report.Comparison("CDC apply", ours=5.0, baseline=2.0, baseline_name="floor", target=2.5)
    assert floor.figure == pytest.approx(2.5) and floor.met and floor.target_text == "≤ 2.5×"
    alternative = report.Comparison("vs seed", ours=4.0, baseline=20.0, baseline_name="seed", target=10, at_most=False)
    assert alternative.figure == pytest.approx(5.0) and not alternative.met
    table = report.comparison_table([floor, alternative])
    assert "| CDC apply | 5.00 s | floor: 2.00 s | 2.50× slower | ≤ 2.5× | yes |" in table
    assert "5.00× faster | ≥ 10× | **no** |" in table

    document = "# Benchmarks\n\nHand-written text.\n"
    once = report.splice(document, "quick", "first")
    twice = report.splice(once, "quick", "second")
    assert twice.count(report.end_marker("quick")) == 1 and "second" in twice and "first" not in twice
    assert twice.startswith(document.rstrip()) and "Hand-written text." in twice
    both = report.splice(twice, "full", "other")
    assert "second" in both and "other" in both


def test_change_sets_have_the_mix_and_touch_distinct_keys() -> None:
    change = generate.ChangeSet(rows=1_000, changes=100, files=4)
    ops = [generate.op_of(k) for k in range(change.changes)]
    assert {op: ops.count(op) for op in "DUI"} == change.counts() == {"D": 10, "U": 80, "I": 10}
    keys = [generate.key_of(change, k) for k in range(change.changes)]
    assert len(set(keys)) == len(keys)
    existing = [key for key, op in zip(keys, ops, strict=True) if op != "I"]
    assert all(0 <= key < change.rows for key in existing)
    assert all(key >= change.rows for key, op in zip(keys, ops, strict=True) if op == "I")
    later = generate.ChangeSet(rows=1_000, changes=100, files=4, batch=1)
    later_keys = {generate.key_of(later, k) for k in range(later.changes)}
    assert not later_keys & set(keys)  # consecutive batches never touch the same key
    assert "primary_key: [id]" in generate.config_yaml("orders_x")


def test_a_comparison_without_a_target_is_reported_not_judged() -> None:
    peer = report.Comparison("peer", ours=4.0, baseline=2.0, baseline_name="pyiceberg", target=None, at_most=False)
    assert peer.met is None and peer.target_text == "—"
    assert peer.figure_text == "2.00× slower"  # the alternative won: said as cdclake's slowdown
    assert "| peer | 4.00 s | pyiceberg: 2.00 s | 2.00× slower | — | — |" in report.comparison_table([peer])
    flatter = report.Comparison("scaling", ours=1.0, baseline=2.0, baseline_name="small", target=1.2)
    assert flatter.figure_text == "2.00× faster" and flatter.met


def test_the_chunked_full_load_covers_every_key_once() -> None:
    import inspect

    source = inspect.getsource(generate.full_load_chunks)
    assert "range(0, rows, chunk_rows)" in source and "min(rows, start + chunk_rows)" in source


def _run() -> ModuleType:
    """bench/run.py imports its siblings as the ``bench`` package: the repository root goes on the path."""
    pytest.importorskip("matplotlib")
    if str(BENCH.parent) not in sys.path:
        sys.path.insert(0, str(BENCH.parent))
    return importlib.import_module("bench.run")


def test_profiles_are_defined_for_every_make_target() -> None:
    run = _run()
    assert set(run.PROFILES) == {"quick", "smoke", "full"} and set(run.SCALE_PROFILES) == {"scale"}
    quick, full = run.PROFILES["quick"], run.PROFILES["full"]
    assert quick.rows * 10 == full.rows and quick.changes * 10 == full.changes  # quick is a tenth of full
    assert quick.peer and run.PROFILES["smoke"].peer and not full.peer  # the pyiceberg peer: quick sizes
    for p in run.PROFILES.values():
        assert p.fixed_changes * 100 == p.rows and p.small_rows * 10 == p.rows
        assert 0 < p.seed_files_timed <= p.seed_files and p.reps >= 1


def test_the_scale_profile_is_the_issues_curve() -> None:
    run = _run()
    scale = run.SCALE_PROFILES["scale"]
    assert scale.sizes == (1_000_000, 10_000_000, 50_000_000) and scale.changes == 100_000
    assert all(size % scale.chunk_rows == 0 or size < scale.chunk_rows for size in scale.sizes)
    assert scale.chunk_rows <= 5_000_000  # 50M rows are generated in chunks
    assert int(scale.driver_memory.rstrip("g")) <= 4  # the issue's driver target is 4 GiB
    assert set(run.SCALE_TARGETS) <= set(scale.sizes)
    assert set(run.PROFILES).isdisjoint(run.SCALE_PROFILES)


def test_scale_comparisons_and_section_from_a_result() -> None:
    run = _run()
    scale = run.SCALE_PROFILES["scale"]
    sizes = [
        {
            "rows": r,
            "load_files": 2,
            "data_files": 1,
            "full_load_seconds": 1.0,
            "cdclake_seconds": c,
            "merge_seconds": m,
        }
        for r, c, m in ((1_000_000, 2.0, 2.0), (10_000_000, 2.2, 6.0), (50_000_000, 3.2, 20.0))
    ]
    result = {
        "sizes": sizes,
        "timings": {"x": 1.0},
        "runs": {"x": [1.0, 1.5]},
        "jvm_peak_mib": 2048.0,
        "python_peak_mib": 100.0,
        "finished": "now",
        "wall_seconds": 60.0,
        "load_average": "3.0",
    }
    comps = {c.name: c for c in run.scale_comparisons(result, scale)}
    assert comps["scaling: 100,000 changes into 10,000,000 vs 1,000,000 rows"].met  # 1.1 ≤ 1.2
    assert not comps["scaling: 100,000 changes into 50,000,000 vs 1,000,000 rows"].met  # 1.6 > 1.5
    assert comps["cdclake vs a plain MERGE of the same 100,000 changes, into 1,000,000 rows"].met  # 1.0 ≤ 1.0
    section = run.render_scale("scale", scale, result, {"cpu": "x"}, "make bench PROFILE=scale")
    assert "benchmarks-scale.png" in section and "under contention" in section
    assert "| 50,000,000 | 2 | 1 | 1.0 s | 3.20 s | 20.00 s | 0.16× |" in section

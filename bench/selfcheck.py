"""The benchmark harness checks itself: its pure parts, so it cannot rot between benchmark runs.

    PYTHONPATH=glue .venv/bin/python -m bench.selfcheck      # make bench-check (make bench runs it first)

The test suite (tests/) tests the product; these checks test bench/'s own arithmetic and text: the
report's ratios and generated section, the change generator's mix and keys, the profiles every make
target names, the scale section, the follow benchmarks' percentiles, rounds and load script, and the
warm/cold summary, the verify section. Each check is a function ``check_*``; the first failure ends the run with 1.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable

from bench import bronze_age, commit_overlap, freshness, report, verify, warm_cold
from bench import generate as gen


def _near(value: float, expected: float) -> bool:
    return math.isclose(value, expected, rel_tol=1e-6)


def check_ratios_targets_and_the_generated_section() -> None:
    floor = report.Comparison("CDC apply", ours=5.0, baseline=2.0, baseline_name="floor", target=2.5)
    assert _near(floor.figure, 2.5) and floor.met and floor.target_text == "≤ 2.5×"
    alternative = report.Comparison("vs seed", ours=4.0, baseline=20.0, baseline_name="seed", target=10, at_most=False)
    assert _near(alternative.figure, 5.0) and not alternative.met
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


def check_commit_overlap_counts_commits_open_together() -> None:
    # two commits at once for a second, then one alone: 3 s of commits in 2 s with one open
    found = commit_overlap.overlap([(0.0, 1.0), (0.0, 1.0), (5.0, 6.0)])
    assert found["commit_seconds_summed"] == 3.0 and found["seconds_with_a_commit_open"] == 2.0
    assert found["mean_commits_at_once"] == 1.5 and found["most_commits_at_once"] == 2
    # one after another: never more than one at once
    assert commit_overlap.overlap([(0.0, 1.0), (1.0, 2.0)])["most_commits_at_once"] == 1


def check_change_sets_have_the_mix_and_touch_distinct_keys() -> None:
    change = gen.ChangeSet(rows=1_000, changes=100, files=4)
    ops = [gen.op_of(k) for k in range(change.changes)]
    assert {op: ops.count(op) for op in "DUI"} == change.counts() == {"D": 10, "U": 80, "I": 10}
    keys = [gen.key_of(change, k) for k in range(change.changes)]
    assert len(set(keys)) == len(keys)
    existing = [key for key, op in zip(keys, ops, strict=True) if op != "I"]
    assert all(0 <= key < change.rows for key in existing)
    assert all(key >= change.rows for key, op in zip(keys, ops, strict=True) if op == "I")
    later = gen.ChangeSet(rows=1_000, changes=100, files=4, batch=1)
    later_keys = {gen.key_of(later, k) for k in range(later.changes)}
    assert not later_keys & set(keys)  # consecutive batches never touch the same key
    assert "primary_key: [id]" in gen.config_yaml("orders_x")


def check_a_comparison_without_a_target_is_reported_not_judged() -> None:
    peer = report.Comparison("peer", ours=4.0, baseline=2.0, baseline_name="pyiceberg", target=None, at_most=False)
    assert peer.met is None and peer.target_text == "—"
    assert peer.figure_text == "2.00× slower"  # the alternative won: said as cdclake's slowdown
    assert "| peer | 4.00 s | pyiceberg: 2.00 s | 2.00× slower | — | — |" in report.comparison_table([peer])
    flatter = report.Comparison("scaling", ours=1.0, baseline=2.0, baseline_name="small", target=1.2)
    assert flatter.figure_text == "2.00× faster" and flatter.met


def check_the_chunked_full_load_covers_every_key_once() -> None:
    source = inspect.getsource(gen.full_load_chunks)
    assert "range(0, rows, chunk_rows)" in source and "min(rows, start + chunk_rows)" in source


def check_profiles_are_defined_for_every_make_target() -> None:
    from bench import run

    assert set(run.PROFILES) == {"quick", "smoke", "full"} and set(run.SCALE_PROFILES) == {"scale"}
    quick, full = run.PROFILES["quick"], run.PROFILES["full"]
    assert quick.rows * 10 == full.rows and quick.changes * 10 == full.changes  # quick is a tenth of full
    assert quick.peer and run.PROFILES["smoke"].peer and not full.peer  # the pyiceberg peer: quick sizes
    for p in run.PROFILES.values():
        assert p.fixed_changes * 100 == p.rows and p.small_rows * 10 == p.rows
        assert 0 < p.seed_files_timed <= p.seed_files and p.reps >= 1


def check_the_scale_profile_is_the_target_curve() -> None:
    from bench import run

    scale = run.SCALE_PROFILES["scale"]
    assert scale.sizes == (1_000_000, 10_000_000, 50_000_000) and scale.changes == 100_000
    assert all(size % scale.chunk_rows == 0 or size < scale.chunk_rows for size in scale.sizes)
    assert scale.chunk_rows <= 5_000_000  # 50M rows are generated in chunks
    assert int(scale.driver_memory.rstrip("g")) <= 4  # the driver target is 4 GiB
    assert set(run.SCALE_TARGETS) <= set(scale.sizes)
    assert set(run.PROFILES).isdisjoint(run.SCALE_PROFILES)


def check_scale_comparisons_and_section_from_a_result() -> None:
    from bench import run

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


def check_percentiles_interpolate_between_closest_ranks() -> None:
    assert freshness.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert _near(freshness.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95), 4.8)
    assert freshness.percentile([7.0], 0.95) == 7.0
    try:
        freshness.percentile([], 0.5)
    except ValueError:
        pass
    else:
        raise AssertionError("the percentile of no lags must be refused")


def check_run_follow_lines_are_grouped_into_rounds_by_when_they_arrived() -> None:
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
    rounds = freshness.rounds_of(lines)
    assert [(r["ended"], r["tables"], r["files"]) for r in rounds] == [(100.2, 3, 4), (106.0, 1, 1)]
    assert _near(rounds[0]["table_seconds"], 3.0)


def check_the_cut_lag_is_read_from_the_cut_lines_at_publishing_and_each_second() -> None:
    from datetime import UTC, datetime

    t0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    lines = [
        (t0 + 3.0, "cut: at 2026-01-01 00:00:01 (lsn 0/10): 2 tables"),
        (t0 + 3.5, "s.t: cdc files=1 2.0s"),
        (t0 + 6.0, "cut: at 2026-01-01 00:00:05.500000 (lsn 0/20): 2 tables; settled in 0.25 s"),
        (t0 + 7.0, "cut: none: no progress record"),
    ]
    lags = freshness.cut_lags(lines, t0 + 2.0, t0 + 8.0)
    # published 2 s and 0.5 s after their T; sampled at 2..8 s: no cut at 2, then T=1 (3, 4, 5), then T=5.5
    assert lags["published"] == [2.0, 0.5]
    assert lags["age"] == [2.0, 3.0, 4.0, 0.5, 1.5, 2.5]
    assert lags["settled"] == [0.25]  # the one line that says how long its cut took


def check_the_background_load_updates_the_benchmark_tables_and_never_the_marker_column() -> None:
    script = freshness.pgbench_script(freshness.FreshnessSettings(tables=30, rows=200))
    assert "random(0, 29)" in script and "random(1, 200)" in script
    assert "UPDATE fresh_:t SET" in script and freshness.table_name(29) == "fresh_29"
    assert " v =" not in script and " v=" not in script


def check_cold_and_warm_are_the_first_and_last_rounds_per_table_over_processes() -> None:
    runs: list[dict[str, object]] = [
        {"session_seconds": 4.0, "round_seconds": [30.0, 20.0, 15.0]},
        {"session_seconds": 6.0, "round_seconds": [36.0, 18.0, 12.0]},
    ]
    summary = warm_cold.summarise(runs, tables=3)
    assert _near(summary["cold_per_table"], 11.0)
    assert _near(summary["warm_per_table"], 4.5)
    assert _near(summary["saved_per_table"], 6.5)
    assert _near(summary["session_seconds"], 5.0)


def check_the_verify_section_sets_each_figure_beside_its_target() -> None:
    def side(seconds: float, source_bytes: int, rows_read: int = 0, ranges: int = 64) -> dict[str, object]:
        return {"seconds": seconds, "source_bytes": source_bytes, "rows_read": rows_read, "ranges": ranges}

    result = {
        "rows": 10_000_000,
        "finished": "2026-11-29 04:00",
        "command": "make bench-verify ROWS=10000000",
        "capture_seconds": 120.0,
        "apply_seconds": 60.0,
        "checksums": side(40.0, 4_200),
        "row_by_row": side(400.0, 520_000_000, 20_000_000),
        "one_differing_row": side(50.0, 30_000, 490, 512),
        "plain_select": {"seconds": 24.0},
        "row_by_row_vs_checksums": 10.0,
        "one_differing_vs_equal": 1.25,
        "each_side_alone": {"source": 21.04, "silver": 30.5},
    }
    section = verify.render(result)
    assert "#### Verify, 10M rows — measured 2026-11-29 04:00" in section
    assert "| checksums vs every row read | 10× faster | ≥ 10×: **met** |" in section
    assert "| bytes from the source, equal, by checksums | 4.2 KB | ≤ 1 MB: **met** |" in section
    assert "| bytes from the source, every row read | 520.0 MB | |" in section
    assert "| the same, each side alone: the source's query / silver's job | 21.0 s / 30.5 s | |" in section
    assert "| one differing row found (490 rows read) | 50.0 s, 1.25× the equal case | ≤ 2×: **met** |" in section
    result["row_by_row_vs_checksums"] = 4.5
    assert "≥ 10×: **missed**" in verify.render(result)


def check_the_aged_bronze_pages_as_s3_and_the_bronze_age_section_judges_the_ratio() -> None:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        old = sorted(bronze_age.old_key("orders", n) for n in range(2500))
        store = bronze_age.AgedBronze(Path(folder), old=old)
        assert [k for k, _ in store.list_keys("s/orders")] == old and store.requests == 3  # 1,000 keys a page
        store.requests = 0
        after = list(store.list_keys("s/orders", start_after=old[-2]))
        assert after == [(old[-1], 1)] and store.requests == 1
        assert list(store.list_keys("s/customers")) == []
    assert bronze_age.old_key("orders", 61) == "s/orders/2020/01/01/20200101-0101000000.csv"

    def side(keys: int, run: float, follow: float) -> dict[str, object]:
        return {
            "keys": keys, "run seconds": [run, run + 1], "run LIST requests": [2, 2], "follow seconds": [follow],
            "follow LIST requests": [6], "peak Python MiB": 3.0, "ledger state (named keys, exceptions, watermarks)": 6,
            "first run seconds": 9.0, "first run LIST requests": 2, "sweep seconds": 20.0, "sweep LIST requests": 1002,
        }  # fmt: skip

    result = {"measured": "2026-12-06 22:00", "moto": {"keys": 5000, "whole listing": 5, "from the watermark": 1}}
    section = bronze_age.render(result | {"small": side(1000, 2.0, 3.0), "large": side(1_000_000, 2.2, 3.9)})
    assert "Run time, 1,000,000 keys vs 1,000: 1.10× (met: ≤ 1.2×); a follow: 1.30× (**missed**: ≤ 1.2×)." in section
    assert "| CDC run, seconds (best; all) | 2.0 ([2.0, 3.0]) | 2.2 ([2.2, 3.2]) |" in section
    assert "the whole listing 5, the listing from the watermark 1" in section


CHECKS: list[Callable[[], None]] = [
    value for name, value in sorted(globals().items()) if name.startswith("check_") and callable(value)
]


def main() -> int:
    for check in CHECKS:
        try:
            check()
        except AssertionError as failure:
            print(f"FAILED {check.__name__}: {failure}", file=sys.stderr)
            return 1
        print(f"ok {check.__name__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

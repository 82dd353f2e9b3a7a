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

"""docs/cost.md's figures are scripts/cost_model.py's output, computed from template.yaml's defaults."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from file_modules import module_at

ROOT = Path(__file__).resolve().parents[2]


def cost_model() -> ModuleType:
    return module_at(ROOT / "scripts" / "cost_model.py", "cost_model")


def test_the_docs_figures_are_the_scripts_output() -> None:
    model = cost_model()
    doc = (ROOT / "docs" / "cost.md").read_text(encoding="utf-8")
    block = doc.split(model.BEGIN, 1)[1].split(model.END, 1)[0]
    assert block == "\n" + model.current(), "run: python scripts/cost_model.py --write"


def test_the_figures_follow_the_template_defaults() -> None:
    # GIVEN the template with the CDC job on twice the workers and sweeps twice as rare
    model = cost_model()
    template = model.load_template()
    definition = json.loads((ROOT / "statemachine" / "cdc_pipeline.asl.json").read_text(encoding="utf-8"))
    defaults = model.Defaults.of(template)
    template["Parameters"]["CdcWorkers"]["Default"] = 2 * int(template["Parameters"]["CdcWorkers"]["Default"])
    changed = model.Defaults.of(template)
    # THEN the model reads them (an always-on month's CDC line doubles)
    assert changed.cdc_dpu == 2 * defaults.cdc_dpu
    always_on = f"| CDC job (Glue) | {model.money(defaults.cdc_dpu * 720 * model.GLUE_DPU_HOUR)} |"
    assert always_on in model.figures(model.load_template(), definition)
    assert f"{model.money(2 * defaults.cdc_dpu * 720 * model.GLUE_DPU_HOUR)} |" in model.figures(template, definition)


def test_a_sweep_without_idle_wait_costs_the_minimum_not_the_idle_seconds() -> None:
    model = cost_model()
    defaults = model.Defaults.of(model.load_template())
    assert model.glue_cost(defaults.cdc_dpu, 1) == model.glue_cost(defaults.cdc_dpu, model.GLUE_MINIMUM_SECONDS)
    assert model.glue_cost(defaults.cdc_dpu, model.START_SECONDS + defaults.idle_seconds) > 5 * model.glue_cost(
        defaults.cdc_dpu, model.START_SECONDS
    )


def test_the_idle_iteration_is_counted_from_the_state_machine() -> None:
    model = cost_model()
    definition = json.loads((ROOT / "statemachine" / "cdc_pipeline.asl.json").read_text(encoding="utf-8"))
    # CheckWork, IsReloadDue, ShouldRunCdcJob, WaitForFiles, NextIteration, IsGoldDue, IsMaintenanceDue,
    # IsHistoryNearLimit
    assert model.idle_iteration_transitions(definition) == 8


def test_a_listing_after_the_watermark_costs_the_same_in_month_six_and_a_whole_one_grows_with_bronze() -> None:
    # GIVEN the template's defaults at 300 tables, one and six months after the first deploy
    model = cost_model()
    defaults = model.Defaults.of(model.load_template())
    young, old = model.RequestMonth(300, 1, defaults), model.RequestMonth(300, 6, defaults)
    # THEN the bounded listing's requests do not grow with age; listing each folder from its start does, with
    # the keys bronze keeps (a page of 1,000 keys each)
    assert old.bounded_listing_requests() == young.bounded_listing_requests()
    assert old.whole_listing_requests() == 11 * young.whole_listing_requests()  # 5.5 vs 0.5 months of keys
    # AND a table commits once per file when its files come slower than the rounds
    assert young.commits == young.files == 300 * 30 * 86400 / defaults.dms_batch_seconds


def test_the_commit_lines_scale_with_the_tables() -> None:
    model = cost_model()
    defaults = model.Defaults.of(model.load_template())
    small, large = model.RequestMonth(30, 1, defaults).lines(), model.RequestMonth(300, 1, defaults).lines()
    assert large["Iceberg commits: S3 PUTs and GETs"] == pytest.approx(10 * small["Iceberg commits: S3 PUTs and GETs"])
    assert large["pipeline metrics and PutMetricData"] == small["pipeline metrics and PutMetricData"]

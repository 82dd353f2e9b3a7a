"""What the deployed stack costs a month, from template.yaml's parameter defaults: the figures of docs/cost.md.

    python scripts/cost_model.py            print the figures (the block between docs/cost.md's markers)
    python scripts/cost_model.py --write    write them into docs/cost.md

Every figure of docs/cost.md's tables comes from here (tests/unit/test_cost_model.py checks the doc against this
script's output): the template's defaults (workers, worker types, the loop's pace, sweeps, maintenance, the relist
interval, the alarms), the state machine's idle path (statemachine/cdc_pipeline.asl.json) and the list prices and
assumptions below. Change a price for another region, or an assumption after measuring yours, and write again.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cost.md"
BEGIN, END = "<!-- cost_model: begin (scripts/cost_model.py --write) -->", "<!-- cost_model: end -->"

# us-east-1 list prices (the AWS pricing pages of Glue, Step Functions, S3, CloudWatch).
GLUE_DPU_HOUR = 0.44  # Glue 5.x Spark jobs, billed per second with a 1-minute minimum per run
GLUE_MINIMUM_SECONDS = 60
STATE_TRANSITION = 0.025 / 1000  # Step Functions Standard
S3_LIST_REQUEST = 0.005 / 1000
ALARM_METRIC_MONTH = 0.10  # standard resolution, per metric an alarm evaluates
DPU_PER_WORKER = {"G.1X": 1, "G.2X": 2, "G.4X": 4, "G.8X": 8}

# Assumptions (not measured in an AWS account; measure yours from the job runs' DPU-seconds and replace them).
START_SECONDS = 60  # a Glue run's start-up, billed (the template's descriptions say "about a minute")
LISTING_SECONDS_PER_TABLE = 0.05  # one folder listing in a sweep run's single round
MAINTENANCE_SECONDS_PER_TABLE = 10.0  # compaction and expiry of one table with a day of commits
BURSTY_ACTIVE_HOURS = 8  # a bursty source: changes during a working day, none the rest of it
DAYS = 30
TABLES = (10, 100, 300)


class _CfnLoader(yaml.SafeLoader):
    """CloudFormation short-form tags (!Ref, !Sub, ...) read as one-key mappings; only the parameters are used."""


def _short_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node, deep=True)}
    assert isinstance(node, yaml.MappingNode)
    return {suffix: loader.construct_mapping(node, deep=True)}


_CfnLoader.add_multi_constructor("!", _short_form)


def load_template(path: Path = ROOT / "template.yaml") -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), Loader=_CfnLoader)  # a SafeLoader
    return loaded


@dataclass(frozen=True)
class Defaults:
    """The template's parameter defaults the model uses."""

    cdc_dpu: int
    maintenance_dpu: int
    full_load_dpu: int
    verify_dpu: int
    poll_seconds: int
    sweep_every: int
    idle_seconds: int
    max_run_seconds: int
    relist_seconds: int
    maintenance_every_hours: int

    @classmethod
    def of(cls, template: dict[str, Any]) -> Defaults:
        p = {name: spec.get("Default") for name, spec in template["Parameters"].items()}
        return cls(
            cdc_dpu=int(p["CdcWorkers"]) * DPU_PER_WORKER[p["CdcWorkerType"]],
            maintenance_dpu=int(p["MaintenanceWorkers"]) * DPU_PER_WORKER[p["MaintenanceWorkerType"]],
            full_load_dpu=int(p["FullLoadWorkers"]) * DPU_PER_WORKER[p["FullLoadWorkerType"]],
            verify_dpu=int(p["VerifyWorkers"]) * DPU_PER_WORKER[p["VerifyWorkerType"]],
            poll_seconds=int(p["PollSeconds"]),
            sweep_every=int(p["SweepEveryIterations"]),
            idle_seconds=int(p["CdcIdleSeconds"]),
            max_run_seconds=int(p["CdcMaxRunSeconds"]),
            relist_seconds=int(p["CdcRelistSeconds"]),
            maintenance_every_hours=int(p["MaintenanceEveryHours"]),
        )


def glue_cost(dpu: int, seconds: float) -> float:
    return dpu * max(seconds, GLUE_MINIMUM_SECONDS) / 3600 * GLUE_DPU_HOUR


def idle_iteration_transitions(definition: dict[str, Any]) -> int:
    """State transitions of one loop iteration without a run: CheckWork's Default path back to CheckWork."""
    states, name, count = definition["States"], "CheckWork", 0
    while True:
        count += 1
        state = states[name]
        name = state.get("Next") or state["Default"]
        if name == "CheckWork":
            return count


def alarm_metrics(template: dict[str, Any]) -> int:
    """The metrics the template's alarms evaluate (an alarm on metric math is billed per metric it reads)."""
    total = 0
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            queries = resource["Properties"].get("Metrics")
            total += sum(1 for q in queries if "MetricStat" in q) if queries else 1
    return total


def money(value: float) -> str:
    return f"${value:,.2f}"


def figures(template: dict[str, Any], definition: dict[str, Any]) -> str:
    """The markdown block of docs/cost.md's figures."""
    d = Defaults.of(template)
    hours = DAYS * 24
    lines = [
        f"Defaults read from template.yaml: CDC job {d.cdc_dpu} DPU, maintenance {d.maintenance_dpu} DPU, full load "
        f"{d.full_load_dpu} DPU; `PollSeconds` {d.poll_seconds}, `SweepEveryIterations` {d.sweep_every}, "
        f"`CdcIdleSeconds` {d.idle_seconds}, `CdcMaxRunSeconds` {d.max_run_seconds}, `CdcRelistSeconds` "
        f"{d.relist_seconds}, `MaintenanceEveryHours` {d.maintenance_every_hours}. Prices: Glue "
        f"${GLUE_DPU_HOUR:g} per DPU-hour (1-minute minimum a run), Step Functions "
        f"${STATE_TRANSITION * 1000:g} per 1,000 transitions, S3 LIST ${S3_LIST_REQUEST * 1000:g} per "
        f"1,000, alarms ${ALARM_METRIC_MONTH:g} per metric-month. A month is {DAYS} days.",
        "",
        "| a month, per environment | always-on source | bursty source |",
        "|---|---:|---:|",
    ]
    # Always-on: the CDC job always busy, its runs back to back (each ends after CdcMaxRunSeconds, the next starts).
    runs_always = hours * 3600 / (d.max_run_seconds + START_SECONDS)
    cdc_always = d.cdc_dpu * hours * GLUE_DPU_HOUR
    # Bursty: busy BURSTY_ACTIVE_HOURS a day, then the run keeps its workers CdcIdleSeconds and ends; the quiet
    # hours start a sweep run every SweepEveryIterations idle iterations of PollSeconds.
    quiet_seconds = (24 - BURSTY_ACTIVE_HOURS) * 3600 * DAYS
    sweep_period = d.sweep_every * d.poll_seconds if d.sweep_every else 0
    sweeps = quiet_seconds / sweep_period if sweep_period else 0.0
    cdc_bursty = d.cdc_dpu * (BURSTY_ACTIVE_HOURS * 3600 + d.idle_seconds) * DAYS / 3600 * GLUE_DPU_HOUR
    transitions = idle_iteration_transitions(definition)
    sfn_idle = quiet_seconds / d.poll_seconds * transitions * STATE_TRANSITION
    alarms = alarm_metrics(template) * ALARM_METRIC_MONTH
    rows: list[tuple[str, float | None, float | None]] = [
        ("CDC job (Glue)", cdc_always, cdc_bursty),
        ("Step Functions, idle iterations", 0.0, sfn_idle),
        ("CloudWatch alarms", alarms, alarms),
    ]
    lines += [f"| {label} | {money(a or 0)} | {money(b or 0)} |" for label, a, b in rows]
    lines.append(
        f"| **total before sweeps, maintenance and listings** | **{money(cdc_always + alarms)}** | "
        f"**{money(cdc_bursty + sfn_idle + alarms)}** |"
    )
    lines += [
        "",
        f"Always-on: about {runs_always:,.0f} CDC runs a month, back to back. Bursty: {BURSTY_ACTIVE_HOURS} busy "
        f"hours a day; each idle iteration of the quiet hours is {transitions} state transitions.",
        "",
        "**Sweeps** (quiet hours only: a source that always has files never sweeps):",
        "",
        "| a sweep run | billed seconds | each | a month (bursty source) |",
        "|---|---:|---:|---:|",
    ]
    for tables in TABLES:
        now = START_SECONDS + LISTING_SECONDS_PER_TABLE * tables
        before = now + d.idle_seconds
        lines.append(
            f"| {tables} tables, `--idle_seconds 0` (now) | {max(now, GLUE_MINIMUM_SECONDS):,.0f} | "
            f"${glue_cost(d.cdc_dpu, now):.3f} | {money(sweeps * glue_cost(d.cdc_dpu, now))} |"
        )
        lines.append(
            f"| {tables} tables, waiting `CdcIdleSeconds` (before) | {before:,.0f} | "
            f"${glue_cost(d.cdc_dpu, before):.3f} | {money(sweeps * glue_cost(d.cdc_dpu, before))} |"
        )
    lines += [
        "",
        f"{sweeps:,.0f} sweeps a month (one every {sweep_period / 60:,.0f} minutes of quiet).",
        "",
        "**Maintenance** (a run `MaintenanceEveryHours` after the last, once a CDC run ran since: on an always-on "
        "source every time it is due; on a bursty one at most that often, and never in a quiet day):",
        "",
        "| tables | a run | always-on: runs, a month | bursty: runs, a month |",
        "|---:|---:|---:|---:|",
    ]
    # Due every N hours; a run starts at the first iteration after that (within a CDC run on an always-on source).
    always_every = d.maintenance_every_hours * 3600 + d.max_run_seconds + START_SECONDS
    runs_m_always = hours * 3600 / always_every if d.maintenance_every_hours else 0.0
    runs_m_bursty = hours / d.maintenance_every_hours if d.maintenance_every_hours else 0.0
    for tables in TABLES:
        run = glue_cost(d.maintenance_dpu, START_SECONDS + MAINTENANCE_SECONDS_PER_TABLE * tables)
        lines.append(
            f"| {tables} | {money(run)} | {runs_m_always:,.0f} = {money(runs_m_always * run)} | "
            f"{runs_m_bursty:,.0f} = {money(runs_m_bursty * run)} |"
        )
    lines += [
        "",
        f"A maintenance run every {always_every / 3600:,.1f} hours on an always-on source (due every "
        f"{d.maintenance_every_hours} hours, started after the CDC run under way then), at most every "
        f"{d.maintenance_every_hours} hours on a bursty one (each table charged in every run: an upper bound where "
        "maintenance skips the tables with no commit since their last maintenance).",
        "",
        "**Full listings of bronze** (every `CdcRelistSeconds` while a run lasts; one request per table folder):",
        "",
        "| tables | LIST requests, always-on month | cost |",
        "|---:|---:|---:|",
    ]
    for tables in TABLES:
        requests = hours * 3600 / d.relist_seconds * tables
        lines.append(f"| {tables} | {requests:,.0f} | {money(requests * S3_LIST_REQUEST)} |")
    lines += [
        "",
        "**The full-load lane** (its own job, started for the tables that need a (re)load):",
        "",
        "| a full-load run | cost |",
        "|---|---:|",
        f"| the shortest (1-minute minimum) | {money(glue_cost(d.full_load_dpu, 0))} |",
        f"| an hour | {money(glue_cost(d.full_load_dpu, 3600))} |",
        "",
        "**The verify job** (with a source secret: after the full load and each table reload, for the reloaded tables,"
        " and on `VerifySchedule` when one is set):",
        "",
        "| a verify run | cost | weekly, a month |",
        "|---|---:|---:|",
    ]
    for label, seconds in (("the shortest (1-minute minimum)", 0), ("10 minutes", 600), ("an hour", 3600)):
        run = glue_cost(d.verify_dpu, seconds)
        lines.append(f"| {label} | {money(run)} | {money(run * 52 / 12)} |")
    return "\n".join(lines) + "\n"


def current() -> str:
    definition = json.loads((ROOT / "statemachine" / "cdc_pipeline.asl.json").read_text(encoding="utf-8"))
    return figures(load_template(), definition)


def with_figures(doc: str, block: str) -> str:
    """``doc`` with the text between its markers replaced by ``block``."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{block}{END}{tail}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the figures into docs/cost.md")
    args = parser.parse_args(argv)
    block = current()
    if args.write:
        DOC.write_text(with_figures(DOC.read_text(encoding="utf-8"), block), encoding="utf-8")
    else:
        print(block, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

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

# us-east-1 list prices (the AWS pricing pages of Glue, Step Functions, S3, SQS, CloudWatch), read 2026-12-06.
PRICES_READ = "2026-12-06"
GLUE_DPU_HOUR = 0.44  # Glue 5.x Spark jobs, billed per second with a 1-minute minimum per run
GLUE_MINIMUM_SECONDS = 60
GLUE_CATALOG_REQUEST = 1.00 / 1_000_000  # Data Catalog requests above the first million a month
STATE_TRANSITION = 0.025 / 1000  # Step Functions Standard
S3_LIST_REQUEST = 0.005 / 1000  # S3 Standard: PUT, COPY, POST and LIST cost the same
S3_PUT_REQUEST = 0.005 / 1000
S3_GET_REQUEST = 0.0004 / 1000
SQS_FIFO_REQUEST = 0.50 / 1_000_000
CUSTOM_METRIC_MONTH = 0.30  # CloudWatch custom metric (the first 10,000 tier)
PUT_METRIC_DATA_REQUEST = 0.01 / 1000
ALARM_METRIC_MONTH = 0.10  # standard resolution, per metric an alarm evaluates
DASHBOARD_MONTH = 3.00
DPU_PER_WORKER = {"G.1X": 1, "G.2X": 2, "G.4X": 4, "G.8X": 8}

# Assumptions (not measured in an AWS account; measure yours from the job runs' DPU-seconds and replace them).
START_SECONDS = 60  # a Glue run's start-up, billed (the template's descriptions say "about a minute")
LISTING_SECONDS_PER_TABLE = 0.05  # one folder listing in a sweep run's single round
MAINTENANCE_SECONDS_PER_TABLE = 10.0  # compaction and expiry of one table with a day of commits
BURSTY_ACTIVE_HOURS = 8  # a bursty source: changes during a working day, none the rest of it
DAYS = 30
TABLES = (10, 100, 300)
# The requests that grow with the tables and with the deployment's age: an always-on source whose every table
# gets a CDC file every DmsCdcMaxBatchIntervalSeconds, at these sizes and ages.
REQUEST_TABLES = (30, 300)
REQUEST_MONTHS = (1, 6)
KEYS_PER_LIST_PAGE = 1000  # ListObjectsV2 returns at most 1,000 keys a request
# One Iceberg commit of a table's batch (merge-on-read row delta): S3 PUTs of a data file, a delete file, a manifest
# for each, the manifest list and the metadata JSON; GETs of the current metadata JSON, the manifest list, about
# four manifests and two data files for the batch's key lookup; the Glue catalog's GetTable and UpdateTable.
# (Counted from what a commit writes and reads, not measured in an account.)
COMMIT_PUTS = 6
COMMIT_GETS = 8
COMMIT_CATALOG_REQUESTS = 2
SQS_REQUESTS_PER_FILE = 3  # EventBridge's SendMessage, the CDC job's ReceiveMessage and DeleteMessage
PIPELINE_METRIC_COUNT = 10  # ops/metrics.py PIPELINE_METRICS: dimension Environment only


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
    cdc_poll_seconds: int
    dms_batch_seconds: int

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
            cdc_poll_seconds=int(p["CdcPollSeconds"]),
            dms_batch_seconds=int(p["DmsCdcMaxBatchIntervalSeconds"]),
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


COMMIT_S3_COST = COMMIT_PUTS * S3_PUT_REQUEST + COMMIT_GETS * S3_GET_REQUEST


def dashboards(template: dict[str, Any]) -> int:
    return sum(1 for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard")


@dataclass(frozen=True)
class RequestMonth:
    """An always-on month's requests at ``tables`` tables, ``age`` months after the first deploy."""

    tables: int
    age: int
    d: Defaults

    @property
    def files(self) -> float:
        """CDC files a month: one per table every DmsCdcMaxBatchIntervalSeconds."""
        return self.tables * DAYS * 86400 / self.d.dms_batch_seconds

    @property
    def rounds(self) -> float:
        return DAYS * 86400 / self.d.cdc_poll_seconds

    @property
    def commits(self) -> float:
        """A table commits once a round in which it has a file: a commit per file when files come slower."""
        return min(self.files, self.rounds * self.tables)

    @property
    def relists(self) -> float:
        return DAYS * 86400 / self.d.relist_seconds

    def whole_listing_requests(self) -> float:
        """Listing every folder from its start at each relist: its pages grow with bronze's age (the keys of
        the month's middle)."""
        keys_per_folder = self.files / self.tables * (self.age - 0.5)
        pages = max(1.0, keys_per_folder / KEYS_PER_LIST_PAGE)
        return self.relists * self.tables * pages

    def bounded_listing_requests(self) -> float:
        """Listing each folder after its watermark (less a look-back) at each relist: a page or so, whatever
        bronze's age; plus a round's look at the folders with news (one request a table a round)."""
        return self.relists * self.tables + self.commits

    def lines(self) -> dict[str, float]:
        commits = self.commits
        cloudwatch = PIPELINE_METRIC_COUNT * CUSTOM_METRIC_MONTH + self.rounds * PUT_METRIC_DATA_REQUEST
        return {
            "listing, each folder from its start (before)": self.whole_listing_requests() * S3_LIST_REQUEST,
            "listing, after each folder's watermark (now)": self.bounded_listing_requests() * S3_LIST_REQUEST,
            "Iceberg commits: S3 PUTs and GETs": commits
            * (COMMIT_PUTS * S3_PUT_REQUEST + COMMIT_GETS * S3_GET_REQUEST),
            "Iceberg commits: Glue Data Catalog": max(0.0, commits * COMMIT_CATALOG_REQUESTS - 1_000_000)
            * GLUE_CATALOG_REQUEST,
            "CDC files read (GET)": self.files * S3_GET_REQUEST,
            "file queue (SQS FIFO)": self.files * SQS_REQUESTS_PER_FILE * SQS_FIFO_REQUEST,
            "pipeline metrics and PutMetricData": cloudwatch,
        }


def requests_section(d: Defaults, template: dict[str, Any]) -> list[str]:
    """The lines that grow with the tables and with bronze's age, and an always-on month in all."""
    months = [RequestMonth(t, a, d) for t in REQUEST_TABLES for a in REQUEST_MONTHS]
    header = " | ".join(f"{m.tables} tables, month {m.age}" for m in months)
    lines = [
        "",
        f"**Requests that grow with the tables and with bronze's age** (always-on: every table gets a CDC file every "
        f"`DmsCdcMaxBatchIntervalSeconds` = {d.dms_batch_seconds} s; a round every `CdcPollSeconds` = "
        f"{d.cdc_poll_seconds} s commits each table with a file; bronze is kept, so a folder holds "
        f"{86400 * DAYS / d.dms_batch_seconds:,.0f} more keys each month):",
        "",
        f"| a month | {header} |",
        "|---|" + "---:|" * len(months),
    ]
    table = {m: m.lines() for m in months}
    for label in table[months[0]]:
        lines.append(f"| {label} | " + " | ".join(money(table[m][label]) for m in months) + " |")
    fixed = alarm_metrics(template) * ALARM_METRIC_MONTH + dashboards(template) * DASHBOARD_MONTH
    lines.append("| alarms and dashboard | " + " | ".join(money(fixed) for _ in months) + " |")
    cdc = d.cdc_dpu * DAYS * 24 * GLUE_DPU_HOUR
    # As the maintenance table above: one run every MaintenanceEveryHours, started after the CDC run under way.
    every = d.maintenance_every_hours * 3600 + d.max_run_seconds + START_SECONDS
    maintenance_runs = DAYS * 24 * 3600 / every if d.maintenance_every_hours else 0.0

    def total(m: RequestMonth, listing: str) -> float:
        grown = sum(v for k, v in table[m].items() if not k.startswith("listing")) + table[m][listing]
        run = glue_cost(d.maintenance_dpu, START_SECONDS + MAINTENANCE_SECONDS_PER_TABLE * m.tables)
        return cdc + maintenance_runs * run + grown + fixed

    before, now = "listing, each folder from its start (before)", "listing, after each folder's watermark (now)"
    lines.append(
        "| **an always-on month in all, listing as before** | "
        + " | ".join(f"**{money(total(m, before))}**" for m in months)
        + " |"
    )
    lines.append(
        "| **an always-on month in all, listing now** | "
        + " | ".join(f"**{money(total(m, now))}**" for m in months)
        + " |"
    )
    commits = {m.tables: m.commits for m in months}
    lines += [
        "",
        f"In all: the CDC job's workers around the clock ({money(cdc)}), maintenance, and the lines above. A table "
        f"commits {commits[REQUEST_TABLES[0]] / REQUEST_TABLES[0]:,.0f} times a month; each commit is about "
        f"{COMMIT_PUTS} S3 PUTs, {COMMIT_GETS} GETs and {COMMIT_CATALOG_REQUESTS} Glue Data Catalog requests (an "
        "estimate from what a commit writes and reads: measure yours with S3 request metrics on the silver "
        f"bucket). Prices read {PRICES_READ}: S3 ${S3_PUT_REQUEST * 1000:g} per 1,000 PUT or LIST, "
        f"${S3_GET_REQUEST * 1000:g} per 1,000 GET; Glue Data Catalog ${GLUE_CATALOG_REQUEST * 1e6:g} per million "
        f"requests above the first million; SQS FIFO ${SQS_FIFO_REQUEST * 1e6:g} per million; CloudWatch "
        f"${CUSTOM_METRIC_MONTH:g} per metric-month, ${PUT_METRIC_DATA_REQUEST * 1000:g} per 1,000 PutMetricData, "
        f"${DASHBOARD_MONTH:g} per dashboard-month.",
    ]
    return lines


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
    lines += requests_section(d, template)
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

"""The gold Glue entry point's own logic: its arguments, one log line per mart, and when the job run fails.

The refresh itself is cdclake.gold.refresh's and is tested with Spark (tests/spark/test_gold.py and the
PostgreSQL marts test); here the engine and the refresh are stand-ins, so no Spark starts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from conftest import ROOT
from test_static import template

from cdclake.gold.refresh import FAILED, PATH_FULL, PATH_INCREMENTAL, REFRESHED, UP_TO_DATE, MartRefresh
from cdclake.mart_config import GoldSettings, MartConfig, with_silver_database
from cdclake.shells.glue_job import JobArguments, job_config
from file_modules import module_at


def load_entry_point() -> ModuleType:
    return module_at(ROOT / "glue" / "jobs" / "gold.py", "glue_job_gold")


gold = load_entry_point()
EXAMPLE_CONFIG = ROOT / "glue" / "cdclake" / "examples" / "hosts.yaml"
# argv as AWS Glue passes it to the gold job: its own arguments among the template's DefaultArguments
ARGV = ["gold.py", "--JOB_ID", "j_1", "--config", str(EXAMPLE_CONFIG), "--bronze", "s3://b/dms",
        "--warehouse", "s3://s/warehouse", "--catalog", "silver", "--database", "cdclake_dev",
        "--gold_database", "cdclake_dev_gold", "--JOB_RUN_ID", "jr_1"]  # fmt: skip

GOOD = MartRefresh("cdclake_dev_gold.hosts_by_city", REFRESHED, PATH_INCREMENTAL, groups=3, seconds=2.04)
SAME = MartRefresh("cdclake_dev_gold.hosts_by_country", UP_TO_DATE, seconds=0.3)
BROKEN = MartRefresh(
    "cdclake_dev_gold.revenue",
    FAILED,
    reason="its SQL does not compile: [UNRESOLVED_COLUMN] `price` cannot be resolved",
    seconds=0.5,
)


class FakeRefresh:
    """Stands in for refresh_marts: records the engines it was given and returns the set results."""

    def __init__(self, results: Sequence[MartRefresh]) -> None:
        self.results = list(results)
        self.calls: list[Any] = []

    def __call__(self, engine: Any, marts: Sequence[MartConfig] | None = None) -> list[MartRefresh]:
        self.calls.append((engine, marts))
        return self.results


def fake_engine(monkeypatch: pytest.MonkeyPatch, marts: tuple[MartConfig, ...] | None = None) -> list[JobArguments]:
    """build_engine -> an object with the configuration the job would use (no Spark session)."""
    built: list[JobArguments] = []

    def build(args: JobArguments) -> SimpleNamespace:
        built.append(args)
        config = job_config(args)
        if marts is not None:
            config = replace(config, gold=GoldSettings(database=config.gold.database, marts=marts))
        return SimpleNamespace(config=config)

    monkeypatch.setattr(gold, "build_engine", build)
    return built


def test_every_mart_gets_one_log_line_and_the_run_succeeds_when_none_failed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    built = fake_engine(monkeypatch)
    refresh = FakeRefresh([GOOD, SAME])
    monkeypatch.setattr(gold, "refresh_marts", refresh)
    with caplog.at_level(logging.INFO, logger="cdclake"):
        results = gold.main(ARGV)
    assert results == [GOOD, SAME]
    # the job ran against the stack's databases, and refreshed every configured mart (marts=None: all)
    [args] = built
    assert (args.database, args.gold_database, args.catalog) == ("cdclake_dev", "cdclake_dev_gold", "silver")
    [(engine, marts)] = refresh.calls
    assert marts is None and engine.config.gold.database == "cdclake_dev_gold"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("gold mart=")]
    assert lines == [
        "gold mart=cdclake_dev_gold.hosts_by_city outcome=refreshed path=incremental groups=3 seconds=2.0",
        "gold mart=cdclake_dev_gold.hosts_by_country outcome=up to date seconds=0.3",
    ]


def test_a_failed_mart_fails_the_run_after_the_others_were_refreshed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake_engine(monkeypatch)
    refresh = FakeRefresh([GOOD, BROKEN, SAME])
    monkeypatch.setattr(gold, "refresh_marts", refresh)
    with caplog.at_level(logging.INFO, logger="cdclake"), pytest.raises(gold.MartsFailed) as failed:
        gold.main(ARGV)
    # the error (the Glue run's ErrorMessage, hence the alert's text) names the failed mart and why
    assert str(failed.value) == (
        "1 of 3 gold mart(s) failed to refresh: cdclake_dev_gold.revenue: "
        "its SQL does not compile: [UNRESOLVED_COLUMN] `price` cannot be resolved"
    )
    # every mart was refreshed in the one call before the run failed, and each has its line
    assert len(refresh.calls) == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("gold mart=")]
    assert [line.split()[1] for line in lines] == [f"mart={r.mart}" for r in (GOOD, BROKEN, SAME)]
    assert "outcome=failed reason=its SQL does not compile" in lines[1]


def test_without_marts_the_job_succeeds_and_refreshes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_engine(monkeypatch, marts=())
    refresh = FakeRefresh([GOOD])
    monkeypatch.setattr(gold, "refresh_marts", refresh)
    assert gold.main(ARGV) == []
    assert refresh.calls == []


def test_a_full_refresh_line_says_why() -> None:
    full = MartRefresh("g.m", REFRESHED, PATH_FULL, reason="first refresh", seconds=12.345)
    assert gold.mart_line(full) == "gold mart=g.m outcome=refreshed path=full reason=first refresh seconds=12.3"


def test_the_template_gives_the_gold_job_what_it_parses() -> None:
    arguments = template()["Resources"]["GoldJob"]["Properties"]["DefaultArguments"]
    assert {"--config", "--bronze", "--warehouse", "--catalog", "--database", "--gold_database"} <= set(arguments)
    assert arguments["--catalog"] == "silver"


def test_marts_are_pointed_at_the_stacks_silver_database_and_nothing_else_changes() -> None:
    # GIVEN a mart written against the configuration's database: catalog-qualified, backquoted, a column
    # qualifier, a history table, and the same name in a string and a comment
    sql = (
        "SELECT airbnb.hosts_silver.id, 'airbnb.hosts_silver' AS label "
        "FROM silver.airbnb.hosts_silver JOIN `airbnb`.`hosts_silver__history` h USING (id) "
        "LEFT JOIN other.lookup l ON l.id = h.id -- airbnb.hosts_silver"
    )
    settings = GoldSettings(marts=(MartConfig(name="m", sql=sql, keys=("id",)),))
    known = {"airbnb.hosts_silver": "hosts_silver", "airbnb.hosts_silver__history": "hosts_silver__history"}
    # WHEN the job's --database names the stack's database
    [mart] = with_silver_database(settings, known, "cdclake_dev").marts
    # THEN every reference to a configured silver table names it, and only those
    assert mart.sql == (
        "SELECT cdclake_dev.hosts_silver.id, 'airbnb.hosts_silver' AS label "
        "FROM cdclake_dev.hosts_silver JOIN cdclake_dev.hosts_silver__history h USING (id) "
        "LEFT JOIN other.lookup l ON l.id = h.id -- airbnb.hosts_silver"
    )
    assert (mart.name, mart.keys) == ("m", ("id",))

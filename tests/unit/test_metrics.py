"""Business metrics: a constant set of pipeline metrics, per-table metrics only for opted-in tables,
one JSON log line per table batch, and publishing them (a recording fake client; moto once)."""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from cdclake.config import load_config
from cdclake.errors import BadInputError, UnknownTableError
from cdclake.ops.metrics import (
    Backlog,
    MetricsTarget,
    freshness_lag,
    log_line,
    metric_data,
    publish,
    table_lines_logger,
    table_log_records,
    table_metrics_for,
)
from cdclake.report import Outcome, RunReport, TableFailure, TableReport

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)
PROD = MetricsTarget("cdclake", "prod")
PIPELINE_NAMES = {
    "FilesApplied", "BytesApplied", "RowsInserted", "RowsUpdated", "RowsDeleted", "TablesFailed",
    "FilesQuarantined", "FreshnessLagSeconds", "BacklogFiles", "BacklogBytes",
}  # fmt: skip  # and CutLagSeconds, only for a run that ended at a consistent cut
TABLE_NAMES = {
    "RowsInserted", "RowsUpdated", "RowsDeleted", "RowsIgnoredLate", "RowsQuarantined", "FilesQuarantined",
    "FilesApplied", "BytesApplied", "BatchSeconds", "FreshnessLagSeconds",
}  # fmt: skip


class RecordingCloudWatch:
    """A CloudWatch client that keeps every ``put_metric_data`` call instead of sending it."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def put_metric_data(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {}


class KeptLines(logging.Handler):
    """A logging handler that keeps each record's message."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _kept_logger(name: str) -> tuple[logging.Logger, KeptLines]:
    logger = logging.getLogger(f"test_metrics.{name}")
    logger.handlers.clear()
    logger.propagate = False
    logger.setLevel(logging.INFO)
    kept = KeptLines()
    logger.addHandler(kept)
    return logger, kept


def _hosts_batch() -> TableReport:
    return TableReport(table="public.hosts", kind="cdc", files_applied=3, files_skipped=1, bytes_applied=2048,
                       changes_read=19, inserted=5, updated=7, deleted=2, deleted_missing=1, ignored_late=1,
                       rows_quarantined=4, quarantined_files=["a.csv"], schema_changes=["added column x"],
                       files_held=2, seconds=12.5, latest_commit_ts="2024-03-01 11:59:00.000000",
                       outcome=Outcome.held("bad row"))  # fmt: skip


def _tables(count: int) -> RunReport:
    """``count`` tables, table i with i+1 files, 100*(i+1) bytes, i inserts, 2i updates, 3i deletes,
    its newest commit i seconds before NOW."""
    return RunReport(
        tables=[
            TableReport(table=f"s.t{i:03d}", kind="cdc", files_applied=i + 1, bytes_applied=100 * (i + 1),
                        inserted=i, updated=2 * i, deleted=3 * i,
                        latest_commit_ts=(NOW - timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S.%f"))
            for i in range(count)
        ]
    )  # fmt: skip


def _values(entries: list[dict[str, Any]]) -> dict[str, tuple[float, str]]:
    return {e["MetricName"]: (e["Value"], e["Unit"]) for e in entries}


def _dimensions(entry: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((d["Name"], d["Value"]) for d in entry["Dimensions"])


def test_the_table_fixture_lags_as_documented() -> None:
    # the lag test below relies on table i having committed i seconds before NOW
    report = _tables(300)
    assert [freshness_lag(t.latest_commit_ts, NOW) for t in report.tables] == [float(i) for i in range(300)]


@pytest.mark.parametrize("tables", [1, 10, 300])
def test_the_number_of_entries_does_not_grow_with_the_tables(tables: int) -> None:
    # GIVEN a run of 1, 10 or 300 tables, none opted in, and a backlog
    report = _tables(tables)
    # WHEN turned into metric data
    entries = metric_data(report, PROD, NOW, Backlog(files=7, bytes=9000))
    # THEN there are the same ten pipeline entries, dimension Environment only
    assert len(entries) == 10
    assert {e["MetricName"] for e in entries} == PIPELINE_NAMES
    assert {_dimensions(e) for e in entries} == {(("Environment", "prod"),)}


def test_pipeline_entries_are_the_runs_totals() -> None:
    # GIVEN three tables (files 1+2+3, bytes 100+200+300, inserts 0+1+2, updates 0+2+4, deletes 0+3+6),
    # one with a quarantined file, and a backlog
    report = _tables(3)
    report.tables[1].quarantined_files = ["q1.csv", "q2.csv"]
    # WHEN turned into metric data
    values = _values(metric_data(report, PROD, NOW, Backlog(files=7, bytes=9000)))
    # THEN each entry is the sum over the tables
    assert values == {
        "FilesApplied": (6.0, "Count"),
        "BytesApplied": (600.0, "Bytes"),
        "RowsInserted": (3.0, "Count"),
        "RowsUpdated": (6.0, "Count"),
        "RowsDeleted": (9.0, "Count"),
        "TablesFailed": (0.0, "Count"),
        "FilesQuarantined": (2.0, "Count"),
        "FreshnessLagSeconds": (2.0, "Seconds"),
        "BacklogFiles": (7.0, "Count"),
        "BacklogBytes": (9000.0, "Bytes"),
    }


def test_lag_is_the_worst_tables() -> None:
    # GIVEN 300 tables lagging 0..299 s, one more with no commit time, and a table of two batches
    # whose older batch lags 1000 s but whose newer one lags 5 s
    report = _tables(300)
    report.tables += [
        TableReport(table="s.unknown", kind="cdc"),
        TableReport(table="s.two", kind="cdc", latest_commit_ts="2024-03-01 11:43:20.000000"),
        TableReport(table="s.two", kind="cdc", latest_commit_ts="2024-03-01 11:59:55.000000"),
    ]
    # WHEN turned into metric data
    values = _values(metric_data(report, PROD, NOW))
    # THEN the lag is the worst table's (299 s), each table counted from its newest commit
    assert values["FreshnessLagSeconds"] == (299.0, "Seconds")


def test_lag_and_backlog_are_absent_when_unknown() -> None:
    # GIVEN a run whose batches know no commit time, and no backlog
    report = RunReport(tables=[TableReport(table="s.a", kind="full-load", files_applied=1)])
    # WHEN turned into metric data
    names = {e["MetricName"] for e in metric_data(report, PROD, NOW)}
    # THEN neither lag nor backlog is made up; the counts are still sent
    assert names == PIPELINE_NAMES - {"FreshnessLagSeconds", "BacklogFiles", "BacklogBytes"}


def test_a_failed_table_counts() -> None:
    # GIVEN a run where one table applied and two failed
    report = _tables(1)
    report.failures = [
        TableFailure("s.bad", "cdc", BadInputError("file x.csv: not a DMS file\nmore detail")),
        TableFailure("s.worse", "full-load", RuntimeError("boom")),
    ]
    # WHEN turned into metric data and log records
    values = _values(metric_data(report, PROD, NOW))
    records = table_log_records(report, PROD, NOW)
    # THEN TablesFailed counts both, and each failed table has a failure record
    assert values["TablesFailed"] == (2.0, "Count")
    assert records[1:] == [
        {"cdclake": "table_failure", "environment": "prod", "table": "s.bad", "kind": "cdc",
         "error": "BadInputError", "exit_code": 2, "message": "file x.csv: not a DMS file"},
        {"cdclake": "table_failure", "environment": "prod", "table": "s.worse", "kind": "full-load",
         "error": "RuntimeError", "exit_code": 1, "message": "boom"},
    ]  # fmt: skip


def test_an_empty_run_still_sends_its_zeros() -> None:
    # GIVEN a run that applied nothing WHEN turned into metric data
    values = _values(metric_data(RunReport(), PROD, NOW))
    # THEN the counts are sent as zeros (an alarm on TablesFailed sees data, not a gap)
    assert values == {name: (0.0, unit) for name, unit in [
        ("FilesApplied", "Count"), ("BytesApplied", "Bytes"), ("RowsInserted", "Count"), ("RowsUpdated", "Count"),
        ("RowsDeleted", "Count"), ("TablesFailed", "Count"), ("FilesQuarantined", "Count")]}  # fmt: skip


def test_opted_in_tables_get_their_own_entries() -> None:
    # GIVEN 300 tables of which public.hosts and s.t007 are opted in
    report = _tables(300)
    report.tables.append(_hosts_batch())
    target = MetricsTarget("cdclake", "prod", table_metrics=frozenset({"public.hosts", "s.t007"}))
    # WHEN turned into metric data
    entries = metric_data(report, target, NOW)
    # THEN the eight pipeline entries (no backlog given) come first, then ten per opted-in table with Table and
    # Environment
    per_table = entries[8:]
    assert {e["MetricName"] for e in entries[:8]} == PIPELINE_NAMES - {"BacklogFiles", "BacklogBytes"}
    assert len(entries) == 8 + 2 * 10
    hosts = [e for e in per_table if _dimensions(e) == (("Table", "public.hosts"), ("Environment", "prod"))]
    assert _values(hosts) == {
        "RowsInserted": (5.0, "Count"),
        "RowsUpdated": (7.0, "Count"),
        "RowsDeleted": (2.0, "Count"),
        "RowsIgnoredLate": (1.0, "Count"),
        "RowsQuarantined": (4.0, "Count"),
        "FilesQuarantined": (1.0, "Count"),
        "FilesApplied": (3.0, "Count"),
        "BytesApplied": (2048.0, "Bytes"),
        "BatchSeconds": (12.5, "Seconds"),
        "FreshnessLagSeconds": (60.0, "Seconds"),
    }
    assert {_dimensions(e) for e in per_table} == {
        (("Table", "public.hosts"), ("Environment", "prod")),
        (("Table", "s.t007"), ("Environment", "prod")),
    }


def test_every_table_batch_gets_one_json_line_with_its_figures() -> None:
    # GIVEN 300 tables and the hosts batch, none opted in
    report = _tables(300)
    report.tables.append(_hosts_batch())
    logger, kept = _kept_logger("lines")
    # WHEN published
    result = publish(RecordingCloudWatch(), PROD, report, now=NOW, log=logger)
    # THEN every batch has exactly one line, each a JSON object marked as a table batch
    records = [json.loads(message) for message in kept.messages]
    assert result.lines == 301
    assert sorted(r["table"] for r in records) == sorted([f"s.t{i:03d}" for i in range(300)] + ["public.hosts"])
    assert {(r["cdclake"], r["environment"]) for r in records} == {("table_batch", "prod")}
    # AND a line's fields are the batch's figures
    assert next(r for r in records if r["table"] == "public.hosts") == {
        "cdclake": "table_batch", "environment": "prod", "table": "public.hosts", "kind": "cdc",
        "files_applied": 3, "files_skipped": 1, "files_quarantined": 1, "files_held": 2, "bytes_applied": 2048,
        "changes_read": 19, "inserted": 5, "updated": 7, "deleted": 2, "deleted_missing": 1, "ignored_late": 1,
        "rows_quarantined": 4, "schema_changes": 1, "columns_dropped_at_source": 0, "seconds": 12.5,
        "latest_commit_ts": "2024-03-01 11:59:00.000000", "lag_seconds": 60.0, "note": "quarantined: bad row",
    }  # fmt: skip
    assert next(r for r in records if r["table"] == "s.t123")["files_applied"] == 124
    # AND no line is in Embedded Metric Format (which would make every table's figures metrics again)
    assert not any("_aws" in r for r in records)


def test_a_table_gets_its_line_whether_or_not_it_is_opted_in() -> None:
    report = RunReport(tables=[_hosts_batch()])
    opted = MetricsTarget("cdclake", "prod", table_metrics=frozenset({"public.hosts"}))
    assert table_log_records(report, opted, NOW) == table_log_records(report, PROD, NOW)


def test_publish_sends_one_request_for_300_tables() -> None:
    # GIVEN 300 tables, none opted in, and a backlog
    client = RecordingCloudWatch()
    logger, _ = _kept_logger("one_request")
    # WHEN published
    result = publish(client, PROD, _tables(300), Backlog(files=12, bytes=3_000_000), NOW, logger)
    # THEN one request carries the ten pipeline entries to the target's namespace
    assert (result.entries, result.requests, result.lines) == (10, 1, 300)
    assert [call["Namespace"] for call in client.calls] == ["cdclake"]
    assert len(client.calls[0]["MetricData"]) == 10


def test_publish_splits_entries_into_requests_of_1000() -> None:
    # GIVEN 150 opted-in tables: 10 pipeline entries + 150 * 10 table entries
    report = _tables(150)
    target = MetricsTarget("cdclake", "prod", table_metrics=frozenset(t.table for t in report.tables))
    client = RecordingCloudWatch()
    logger, _ = _kept_logger("chunks")
    # WHEN published
    result = publish(client, target, report, Backlog(files=0, bytes=0), NOW, logger)
    # THEN the 1,510 entries go in two requests, none over PutMetricData's 1,000
    assert [len(call["MetricData"]) for call in client.calls] == [1000, 510]
    assert (result.entries, result.requests) == (1510, 2)


def test_lines_are_logged_before_cloudwatch_is_called() -> None:
    # GIVEN a CloudWatch client that fails
    class FailingCloudWatch:
        def put_metric_data(self, **kwargs: Any) -> dict[str, Any]:
            raise RuntimeError("throttled")

    logger, kept = _kept_logger("failing")
    # WHEN published THEN the error propagates, but every table's line was logged first
    with pytest.raises(RuntimeError, match="throttled"):
        publish(FailingCloudWatch(), PROD, _tables(3), now=NOW, log=logger)
    assert len(kept.messages) == 3


def test_table_lines_logger_writes_bare_json(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN the table lines logger on a stream
    stream = io.StringIO()
    logger = table_lines_logger(stream)
    # WHEN a run is published through it
    publish(RecordingCloudWatch(), PROD, RunReport(tables=[_hosts_batch()]), now=NOW, log=logger)
    # THEN the stream holds the JSON line alone (no time or level before it), and nothing reached the root logger
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["table"] == "public.hosts"
    assert caplog.records == []
    # AND asking for it again does not add a second handler (a line would be written twice)
    assert len(table_lines_logger(stream).handlers) == 1


def test_a_line_is_compact() -> None:
    # GIVEN a batch with a long table name and large figures (docs/cost.md prices lines of this size)
    batch = TableReport(table="sales_reporting.customer_order_line_item_adjustments", kind="cdc",
                        files_applied=10, files_skipped=10, bytes_applied=536_870_912, changes_read=3_800_000,
                        inserted=1_900_000, updated=1_200_000, deleted=700_000, deleted_missing=1_000,
                        ignored_late=1_000, seconds=35.123456,
                        latest_commit_ts="2024-03-01 11:58:59.123456")  # fmt: skip
    # WHEN written as a line
    line = log_line(table_log_records(RunReport(tables=[batch]), MetricsTarget("cdclake", "production"), NOW)[0])
    # THEN it stays within the 520 bytes docs/cost.md prices (513 measured)
    assert len(line.encode()) <= 520


def test_table_metrics_for_accepts_source_and_silver_names(hosts_yaml: Path) -> None:
    # GIVEN the example configuration (public.hosts_demo, silver hosts_silver)
    config = load_config(hosts_yaml)
    # WHEN names are resolved THEN each becomes the source name a report carries; blanks are skipped
    assert table_metrics_for(["hosts_silver", " public.hosts_demo", ""], config) == frozenset({"public.hosts_demo"})
    # AND an unknown name is an error, not a silently unwatched table
    with pytest.raises(UnknownTableError, match="nope"):
        table_metrics_for(["nope"], config)


def test_a_backlog_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        Backlog(files=-1, bytes=0)


def test_lag_is_absent_without_a_commit_time() -> None:
    assert freshness_lag(None, NOW) is None
    assert freshness_lag("not a time", NOW) is None
    assert freshness_lag("2024-03-01 12:00:30.000000", NOW) == 0.0  # clocks a little apart never go negative


def test_publish_sends_the_metrics_to_cloudwatch(aws_credentials: None) -> None:
    # GIVEN moto's CloudWatch, 300 tables and one opted in
    report = _tables(300)
    report.tables.append(_hosts_batch())
    target = MetricsTarget("cdclake-test", "dev", table_metrics=frozenset({"public.hosts"}))
    logger, _ = _kept_logger("moto")
    with mock_aws():
        client = boto3.client("cloudwatch", region_name="us-east-1")
        # WHEN published
        result = publish(client, target, report, Backlog(files=1, bytes=10), NOW, logger)
        metrics = client.list_metrics(Namespace="cdclake-test")["Metrics"]
    # THEN CloudWatch accepted the entries: the pipeline's under Environment, the opted-in table's under Table too
    assert result.entries == 20
    pipeline = {m["MetricName"] for m in metrics if [d["Name"] for d in m["Dimensions"]] == ["Environment"]}
    hosts = {m["MetricName"] for m in metrics if {"Name": "Table", "Value": "public.hosts"} in m["Dimensions"]}
    assert pipeline == PIPELINE_NAMES
    assert hosts == TABLE_NAMES
    assert len(metrics) == 20


def test_cut_lag_is_now_minus_the_cut_source_commit_time_and_absent_without_a_cut() -> None:
    # GIVEN a run that ended at a cut whose source commit time is 90 s before now, and one that ended at none
    at_cut = RunReport(cut="at 2024-03-01 11:58:30.000000 (LSN 0/1): 2 tables", cut_commit_ts="2024-03-01 11:58:30")
    no_cut = RunReport(cut="no new cut: s.a: s/a/x.csv is not applied yet")
    # WHEN turned into metric data
    values = _values(metric_data(at_cut, PROD, NOW))
    names = {e["MetricName"] for e in metric_data(no_cut, PROD, NOW)}
    # THEN CutLagSeconds is the cut's age, and not made up without a cut
    assert values["CutLagSeconds"] == (90.0, "Seconds")
    assert "CutLagSeconds" not in names

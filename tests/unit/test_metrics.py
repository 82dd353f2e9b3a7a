"""Business metrics: the pure MetricData entries, and publishing them to CloudWatch (moto)."""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
from moto import mock_aws

from cdclake.ops.metrics import MetricsTarget, freshness_lag, metric_data, publish
from cdclake.report import RunReport, TableReport

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)


def _report() -> RunReport:
    batch = TableReport(table="public.hosts", kind="cdc", files_applied=3, bytes_applied=2048, inserted=5, updated=7,
                        deleted=2, ignored_late=1, rows_quarantined=4, quarantined_files=["a.csv"], seconds=12.5,
                        latest_commit_ts="2024-03-01 11:59:00.000000")  # fmt: skip
    return RunReport(tables=[batch])


def test_metric_data_has_one_entry_per_business_metric() -> None:
    # GIVEN a CDC batch report WHEN turned into metric data
    entries = metric_data(_report(), MetricsTarget("cdclake", "prod"), NOW)
    # THEN every metric carries the table and environment, with the batch's values
    values = {e["MetricName"]: (e["Value"], e["Unit"]) for e in entries}
    assert values == {
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
    assert {tuple((d["Name"], d["Value"]) for d in e["Dimensions"]) for e in entries} == {
        (("Table", "public.hosts"), ("Environment", "prod"))
    }


def test_lag_is_absent_without_a_commit_time() -> None:
    assert freshness_lag(None, NOW) is None
    assert freshness_lag("not a time", NOW) is None
    assert freshness_lag("2024-03-01 12:00:30.000000", NOW) == 0.0  # clocks a little apart never go negative


def test_publish_sends_the_metrics_to_cloudwatch(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    with mock_aws():
        client = boto3.client("cloudwatch", region_name="us-east-1")
        sent = publish(client, MetricsTarget("cdclake-test", "dev"), _report(), NOW)
        names = {m["MetricName"] for m in client.list_metrics(Namespace="cdclake-test")["Metrics"]}
    assert sent == 10
    assert names == {
        "RowsInserted", "RowsUpdated", "RowsDeleted", "RowsIgnoredLate", "RowsQuarantined", "FilesQuarantined",
        "FilesApplied", "BytesApplied", "BatchSeconds", "FreshnessLagSeconds",
    }  # fmt: skip

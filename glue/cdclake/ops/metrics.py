"""Business metrics of a run for CloudWatch: rows inserted / updated / deleted / ignored as late /
quarantined, files and bytes applied, batch duration and freshness lag, per table.

``metric_data`` is pure (a report in, CloudWatch ``MetricData`` entries out); ``publish`` is the
edge and takes its CloudWatch client as a parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.report import RunReport

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
else:
    CloudWatchClient = Any

_MAX_PER_CALL = 1000  # PutMetricData accepts up to 1,000 entries per request


@dataclass(frozen=True)
class MetricsTarget:
    namespace: str = "cdclake"
    environment: str = "dev"


def freshness_lag(latest_commit_ts: str | None, now: datetime) -> float | None:
    """Seconds between ``now`` and the newest applied source commit (DMS timestamps are UTC)."""
    if not latest_commit_ts:
        return None
    try:
        moment = datetime.fromisoformat(latest_commit_ts).replace(tzinfo=UTC)
    except ValueError:
        return None
    return max(0.0, (now - moment).total_seconds())


def metric_data(report: RunReport, target: MetricsTarget, now: datetime) -> list[dict[str, Any]]:
    """One entry per metric and table batch of ``report``."""
    entries: list[dict[str, Any]] = []
    for table in report.tables:
        dimensions = [{"Name": "Table", "Value": table.table}, {"Name": "Environment", "Value": target.environment}]
        values: list[tuple[str, float, str]] = [
            ("RowsInserted", table.inserted, "Count"),
            ("RowsUpdated", table.updated, "Count"),
            ("RowsDeleted", table.deleted, "Count"),
            ("RowsIgnoredLate", table.ignored_late, "Count"),
            ("RowsQuarantined", table.rows_quarantined, "Count"),
            ("FilesQuarantined", len(table.quarantined_files), "Count"),
            ("FilesApplied", table.files_applied, "Count"),
            ("BytesApplied", table.bytes_applied, "Bytes"),
            ("BatchSeconds", table.seconds, "Seconds"),
        ]
        lag = freshness_lag(table.latest_commit_ts, now)
        if lag is not None:
            values.append(("FreshnessLagSeconds", lag, "Seconds"))
        entries += [
            {"MetricName": name, "Dimensions": dimensions, "Value": float(value), "Unit": unit, "Timestamp": now}
            for name, value, unit in values
        ]
    return entries


def publish(client: CloudWatchClient, target: MetricsTarget, report: RunReport, now: datetime | None = None) -> int:
    """Send the run's metrics to CloudWatch; return how many entries were sent."""
    entries = metric_data(report, target, now or datetime.now(UTC))
    for start in range(0, len(entries), _MAX_PER_CALL):
        client.put_metric_data(Namespace=target.namespace, MetricData=entries[start : start + _MAX_PER_CALL])  # type: ignore[arg-type]
    return len(entries)

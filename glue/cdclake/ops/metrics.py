"""Business metrics of a run: a constant set of pipeline metrics for CloudWatch, one JSON log line per
table batch, and per-table CloudWatch metrics only for the tables a deployment opts in.

Why the split: a CloudWatch custom metric is billed per metric (name + dimensions) and month, so
ten per-table metrics cost ``10 * tables * $0.30`` a month (about $900 at 300 tables), while a log
line costs its bytes once. The pipeline metrics (files and bytes applied, rows inserted / updated /
deleted, failed tables, quarantined files, the worst table's freshness lag, the backlog) keep the
alarms and the dashboard's totals; the per-table figures stay queryable in CloudWatch Logs
Insights::

    filter cdclake = "table_batch" | stats sum(files_applied), max(lag_seconds) by table

The lines are plain JSON on purpose, not CloudWatch Embedded Metric Format: EMF would turn every
table's figures into custom metrics again. ``docs/cost.md`` has the arithmetic.

``metric_data`` and ``table_log_records`` are pure (a report in, entries and records out);
``publish`` is the edge and takes its CloudWatch client and logger as parameters.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from cdclake.ops import metric_catalog as m
from cdclake.ops.metric_catalog import Metric
from cdclake.report import Backlog, RunReport, TableFailure, TableReport

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient

    from cdclake.config import PipelineConfig
else:
    CloudWatchClient = Any

_MAX_PER_CALL = 1000  # PutMetricData accepts up to 1,000 entries per request

TABLE_BATCH = "table_batch"  # the ``cdclake`` field of a table batch's log line
TABLE_FAILURE = "table_failure"  # the ``cdclake`` field of a failed table's log line
TABLE_LINES_LOGGER = "cdclake.table_lines"  # the logger ``table_lines_logger`` sets up


@dataclass(frozen=True)
class MetricsTarget:
    """Where a run's metrics go, and which tables also get CloudWatch metrics of their own."""

    namespace: str = "cdclake"
    environment: str = "dev"  # the Environment dimension, and the ``environment`` field of every log line
    # Tables (source names, ``schema.table``: what ``TableReport.table`` holds) that also get the ten
    # per-table metrics (dimensions Table and Environment), at about $3 a table-month;
    # ``table_metrics_for`` accepts silver names too. Every table gets its log line either way.
    table_metrics: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PublishResult:
    """What ``publish`` sent: metric entries, PutMetricData requests, and table log lines."""

    entries: int
    requests: int
    lines: int


def table_metrics_for(names: Iterable[str], config: PipelineConfig) -> frozenset[str]:
    """The source names (``schema.table``) of ``names``, each a source name, source table name or
    silver name of a table in ``config``: what ``MetricsTarget.table_metrics`` holds. Blank names are
    skipped (a comma-separated job argument may end with a comma); an unknown name raises
    ``UnknownTableError`` naming the known tables."""
    return frozenset(config.table(name.strip()).source for name in names if name.strip())


def freshness_lag(latest_commit_ts: str | None, now: datetime) -> float | None:
    """Seconds between ``now`` and the newest applied source commit (DMS timestamps are UTC)."""
    if not latest_commit_ts:
        return None
    try:
        moment = datetime.fromisoformat(latest_commit_ts).replace(tzinfo=UTC)
    except ValueError:
        return None
    return max(0.0, (now - moment).total_seconds())


def worst_lag(report: RunReport, now: datetime) -> float | None:
    """The largest freshness lag among the tables ``report`` applied, a table's lag taken from its
    newest commit over its batches (None when no batch knows its commit time). Tables the run did not
    touch, or that failed, are not measured here: ``TablesFailed`` and ``cdclake status`` cover them."""
    per_table: dict[str, float] = {}
    for batch in report.tables:
        lag = freshness_lag(batch.latest_commit_ts, now)
        if lag is not None:
            per_table[batch.table] = min(lag, per_table.get(batch.table, lag))
    return max(per_table.values(), default=None)


def _entry(metric: Metric, value: float, dimensions: list[dict[str, str]], now: datetime) -> dict[str, Any]:
    """One MetricData entry of ``metric`` (its declared name and unit)."""
    return {
        "MetricName": metric.name,
        "Dimensions": dimensions,
        "Value": float(value),
        "Unit": metric.unit,
        "Timestamp": now,
    }


def pipeline_metric_data(
    report: RunReport, target: MetricsTarget, now: datetime, backlog: Backlog | None = None
) -> list[dict[str, Any]]:
    """The run's totals as MetricData entries with the one dimension Environment: files and bytes
    applied, rows inserted / updated / deleted, failed tables, quarantined files (always, zeros
    included, so alarms see data), the worst table's freshness lag (when known) and the backlog
    (when given). At most ``len(metric_catalog.PIPELINE_METRICS)`` entries, whatever the number of tables."""
    dimensions = [{"Name": "Environment", "Value": target.environment}]
    batches = report.tables
    values: list[tuple[Metric, float]] = [
        (m.FILES_APPLIED, sum(t.files_applied for t in batches)),
        (m.BYTES_APPLIED, sum(t.bytes_applied for t in batches)),
        (m.ROWS_INSERTED, sum(t.inserted for t in batches)),
        (m.ROWS_UPDATED, sum(t.updated for t in batches)),
        (m.ROWS_DELETED, sum(t.deleted for t in batches)),
        (m.TABLES_FAILED, len(report.failures)),
        (m.FILES_QUARANTINED, sum(len(t.quarantined_files) for t in batches)),
    ]
    lag = worst_lag(report, now)
    if lag is not None:
        values.append((m.FRESHNESS_LAG, lag))
    if backlog is not None:
        values += [(m.BACKLOG_FILES, backlog.files), (m.BACKLOG_BYTES, backlog.bytes)]
    cut_lag = freshness_lag(report.cut_commit_ts, now)
    if cut_lag is not None:
        values.append((m.CUT_LAG, cut_lag))
    return [_entry(metric, value, dimensions, now) for metric, value in values]


def table_metric_data(report: RunReport, target: MetricsTarget, now: datetime) -> list[dict[str, Any]]:
    """Ten entries (nine when the commit time is unknown) per batch of an opted-in table
    (``target.table_metrics``), dimensions Table and Environment; none for the other tables."""
    entries: list[dict[str, Any]] = []
    for table in report.tables:
        if table.table not in target.table_metrics:
            continue
        dimensions = [{"Name": "Table", "Value": table.table}, {"Name": "Environment", "Value": target.environment}]
        values: list[tuple[Metric, float]] = [
            (m.ROWS_INSERTED, table.inserted),
            (m.ROWS_UPDATED, table.updated),
            (m.ROWS_DELETED, table.deleted),
            (m.ROWS_IGNORED_LATE, table.ignored_late),
            (m.ROWS_QUARANTINED, table.rows_quarantined),
            (m.FILES_QUARANTINED, len(table.quarantined_files)),
            (m.FILES_APPLIED, table.files_applied),
            (m.BYTES_APPLIED, table.bytes_applied),
            (m.BATCH_SECONDS, table.seconds),
        ]
        lag = freshness_lag(table.latest_commit_ts, now)
        if lag is not None:
            values.append((m.FRESHNESS_LAG, lag))
        entries += [_entry(metric, value, dimensions, now) for metric, value in values]
    return entries


def metric_data(
    report: RunReport, target: MetricsTarget, now: datetime, backlog: Backlog | None = None
) -> list[dict[str, Any]]:
    """Every MetricData entry of a run: the pipeline's, then the opted-in tables'."""
    return pipeline_metric_data(report, target, now, backlog) + table_metric_data(report, target, now)


def _rounded(seconds: float | None) -> float | None:
    """Seconds to a tenth: a log line needs no microseconds."""
    return None if seconds is None else round(seconds, 1)


def _batch_record(batch: TableReport, environment: str, now: datetime) -> dict[str, Any]:
    return {
        "cdclake": TABLE_BATCH,
        "environment": environment,
        "table": batch.table,
        "kind": batch.kind,
        "files_applied": batch.files_applied,
        "files_skipped": batch.files_skipped,
        "files_quarantined": len(batch.quarantined_files),
        "files_held": batch.files_held,
        "bytes_applied": batch.bytes_applied,
        "changes_read": batch.changes_read,
        "inserted": batch.inserted,
        "updated": batch.updated,
        "deleted": batch.deleted,
        "deleted_missing": batch.deleted_missing,
        "ignored_late": batch.ignored_late,
        "rows_quarantined": batch.rows_quarantined,
        "schema_changes": len(batch.schema_changes),
        "columns_dropped_at_source": len(batch.columns_dropped_at_source),
        "seconds": round(batch.seconds, 3),
        "latest_commit_ts": batch.latest_commit_ts,
        "lag_seconds": _rounded(freshness_lag(batch.latest_commit_ts, now)),
        "note": batch.note,
    }


def _failure_record(failure: TableFailure, environment: str) -> dict[str, Any]:
    lines = str(failure.error).strip().splitlines()
    return {
        "cdclake": TABLE_FAILURE,
        "environment": environment,
        "table": failure.table,
        "kind": failure.kind,
        "error": type(failure.error).__name__,
        "exit_code": failure.exit_code,
        "message": lines[0] if lines else "",
    }


def table_log_records(report: RunReport, target: MetricsTarget, now: datetime) -> list[dict[str, Any]]:
    """One record per table batch of ``report`` (``"cdclake": "table_batch"``: the batch's figures under
    ``TableReport``'s names, list fields as counts, plus ``lag_seconds``), then one per failed table
    (``"cdclake": "table_failure"``: the error's type, exit code and first line). Every record names
    the environment; the records of a table are the same whether or not it is opted in."""
    return [_batch_record(batch, target.environment, now) for batch in report.tables] + [
        _failure_record(failure, target.environment) for failure in report.failures
    ]


def log_line(record: dict[str, Any]) -> str:
    """``record`` as one compact JSON line (what Logs Insights parses into fields)."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def table_lines_logger(stream: TextIO | None = None) -> logging.Logger:
    """The logger ``publish`` writes table lines to unless given another: its records are the bare
    JSON text (Logs Insights discovers fields only in a log event that is JSON, so no time or level
    prefix such as the jobs' ``basicConfig`` format adds) and do not propagate to the root logger's
    handlers. Writes to standard error unless ``stream`` is given; calling it again returns the same
    logger with one handler."""
    logger = logging.getLogger(TABLE_LINES_LOGGER)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def publish(
    client: CloudWatchClient,
    target: MetricsTarget,
    report: RunReport,
    backlog: Backlog | None = None,
    now: datetime | None = None,
    log: logging.Logger | None = None,
) -> PublishResult:
    """Log one JSON line per table batch and failed table (INFO, message = the JSON text) to ``log``
    (default: ``table_lines_logger()``), then send the run's metric entries to CloudWatch in requests
    of at most 1,000. The lines go first, so an error from CloudWatch (which propagates) loses no
    table's figures."""
    moment = now or datetime.now(UTC)
    logger = log or table_lines_logger()
    records = table_log_records(report, target, moment)
    for record in records:
        logger.info("%s", log_line(record))
    entries = metric_data(report, target, moment, backlog)
    requests = 0
    for start in range(0, len(entries), _MAX_PER_CALL):
        client.put_metric_data(Namespace=target.namespace, MetricData=entries[start : start + _MAX_PER_CALL])  # type: ignore[arg-type]
        requests += 1
    return PublishResult(entries=len(entries), requests=requests, lines=len(records))

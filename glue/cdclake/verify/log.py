"""What a verify run leaves behind on AWS: one row per table in ``cdclake_verify`` and one datapoint a run.

``cdclake_verify`` is a small Iceberg table (format v2, Athena reads it) beside the silver tables. Each run
writes one row per table it compared, keyed by (run_id, source_table): a retried run MERGEs its rows again
instead of adding a second set. The rows and the metrics are built by pure functions from the comparisons
(``verify_rows``, ``summary_of``, ``verify_metric_data``); only ``record_verify_run`` and ``publish_verify_metrics``
touch Spark and CloudWatch, with what they are handed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cdclake.lake.journals import VERIFY_TABLE
from cdclake.lake.tables import SilverTable, ensure_table, is_commit_conflict, merge_frame
from cdclake.ops import metric_catalog as m

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdclake.verify.job import TableVerified
    from cdclake.verify.result import TableComparison, Verdict

SAMPLE_KEYS = 20  # differing keys kept per table in sample_keys
# A MERGE that loses to another commit (maintenance compacting the table) is tried again, this often in all.
RECORD_ATTEMPTS = 3
# Keys of each kind in a table's log line: a line stays well under CloudWatch Logs' 256 KB event limit.
LOGGED_KEYS = 1000

# The table's columns, in order (Athena: SELECT * FROM cdclake_<env>.cdclake_verify ORDER BY started DESC).
VERIFY_SCHEMA = (
    "run_id string, source_table string, started timestamp, finished timestamp, source_position string, "
    "source_clock timestamp, "
    "method string, ranges_compared bigint, ranges_differing bigint, rows_read bigint, source_rows bigint, "
    "silver_rows bigint, rows_differing bigint, verdict string, problem string, sample_keys string"
)


@dataclass(frozen=True)
class VerifyRow:
    """One table's result of one run, as ``cdclake_verify`` stores it (the fields in VERIFY_SCHEMA's order)."""

    run_id: str
    source_table: str  # schema.table at the source
    started: datetime
    finished: datetime
    # Where the source stood when the run began: its log position (PostgreSQL's LSN), else its clock; None: not
    # known (the source unreachable)
    source_position: str | None
    source_clock: datetime | None  # the source's clock then (UTC), which silver's commit times are compared with
    method: str  # "checksums" (key ranges) or "rows" (every row read)
    ranges_compared: int
    ranges_differing: int
    rows_read: int  # rows read from the two sides to compare them value by value
    source_rows: int
    silver_rows: int
    rows_differing: int  # keys missing, unexpected, different, or with a default not in silver
    verdict: Verdict
    problem: str | None  # why a skipped table could not be compared
    sample_keys: str  # JSON: the first SAMPLE_KEYS differing keys, [{"key", "kind", "columns"}]


@dataclass(frozen=True)
class VerifySummary:
    """A run in four numbers: what its metrics publish."""

    tables_compared: int  # equal or differing (not skipped)
    tables_differing: int
    rows_differing: int
    tables_skipped: int
    tables_lagging: int = 0  # silver had not caught up with the source within the run's wait


@dataclass(frozen=True)
class VerifyRun:
    """What the verify job returns: its id, the rows it recorded and their summary."""

    run_id: str
    rows: list[VerifyRow]
    summary: VerifySummary


def verdict_of(comparison: TableComparison) -> Verdict:
    return comparison.verdict


def differing_keys(comparison: TableComparison) -> list[dict[str, Any]]:
    """Every differing key with its kind (and, for a row whose content differs, the columns that differ)."""
    kinds = (
        ("missing", comparison.missing),  # at the source, not in silver
        ("unexpected", comparison.unexpected),  # in silver, not at the source
        ("different", comparison.different),
        ("default_not_in_silver", comparison.unlogged_defaults),
    )
    found: list[dict[str, Any]] = []
    for kind, keys in kinds:
        for key in keys:
            columns = comparison.differing_columns.get(key, []) if kind == "different" else []
            found.append({"key": key, "kind": kind, "columns": list(columns)})
    return found


def log_record(run_id: str, comparison: TableComparison, limit: int = LOGGED_KEYS) -> dict[str, Any]:
    """A table's comparison as the job logs it (``"cdclake": "verify_table"``): ``--format json``'s fields with at
    most ``limit`` keys of each kind, and each kind's full count."""
    record: dict[str, Any] = {"cdclake": "verify_table", "run_id": run_id, **comparison.as_json()}
    for kind in ("missing", "unexpected", "different", "default_not_in_silver"):
        keys = record[kind]
        record[f"{kind}_count"] = len(keys)
        record[kind] = dict(list(keys.items())[:limit]) if isinstance(keys, dict) else keys[:limit]
    return record


def verify_rows(run_id: str, verified: Sequence[TableVerified]) -> list[VerifyRow]:
    """The ``cdclake_verify`` rows of one run: one per table compared (or skipped), in the order given."""
    rows = []
    for item in verified:
        c = item.comparison
        keys = differing_keys(c)
        rows.append(
            VerifyRow(
                run_id=run_id,
                source_table=c.table,
                started=item.started,
                finished=item.finished,
                source_position=item.position,
                source_clock=item.source_clock,
                method=c.method,
                ranges_compared=c.ranges,
                ranges_differing=c.ranges_differing,
                rows_read=c.rows_read,
                source_rows=c.source_rows,
                silver_rows=c.silver_rows,
                rows_differing=len(keys),
                verdict=verdict_of(c),
                problem=c.problem or None,
                sample_keys=json.dumps(keys[:SAMPLE_KEYS], ensure_ascii=False),
            )
        )
    return rows


def summary_of(rows: Sequence[VerifyRow]) -> VerifySummary:
    return VerifySummary(
        tables_compared=sum(1 for r in rows if r.verdict != "skipped"),
        tables_differing=sum(1 for r in rows if r.verdict == "differing"),
        rows_differing=sum(r.rows_differing for r in rows),
        tables_skipped=sum(1 for r in rows if r.verdict == "skipped"),
        tables_lagging=sum(1 for r in rows if r.verdict == "lagging"),
    )


def verify_metric_data(summary: VerifySummary, environment: str, now: datetime) -> list[dict[str, Any]]:
    """One datapoint a run of each verify metric, dimension Environment (the stack's alarms watch these)."""
    values = (
        (m.TABLES_DIFFERING, summary.tables_differing),
        (m.ROWS_DIFFERING, summary.rows_differing),
        (m.TABLES_SKIPPED, summary.tables_skipped),
        (m.TABLES_VERIFIED, summary.tables_compared),
        (m.TABLES_LAGGING, summary.tables_lagging),
    )
    dimensions = [{"Name": "Environment", "Value": environment}]
    return [
        {
            "MetricName": metric.name,
            "Dimensions": dimensions,
            "Value": float(value),
            "Unit": metric.unit,
            "Timestamp": now,
        }
        for metric, value in values
    ]


def publish_verify_metrics(
    client: Any, namespace: str, summary: VerifySummary, environment: str, now: datetime
) -> None:
    """Send the run's datapoints to CloudWatch (``client``: boto3's cloudwatch client)."""
    client.put_metric_data(Namespace=namespace, MetricData=verify_metric_data(summary, environment, now))


def record_verify_run(spark: SparkSession, catalog: str, database: str, rows: Sequence[VerifyRow]) -> None:
    """MERGE the run's rows into ``<database>.cdclake_verify`` (created on first use) on (run_id, source_table):
    a run recorded again (a retry) replaces its rows, never adds a second set. A MERGE that loses a race with
    another commit (the maintenance job compacting the table) is tried again."""
    if not rows:
        return
    log_table = SilverTable(catalog, database, VERIFY_TABLE)
    frame = spark.createDataFrame([astuple(r) for r in rows], VERIFY_SCHEMA)
    ensure_table(spark, log_table, frame)
    names = [f.name for f in fields(VerifyRow)]
    updates = ", ".join(f"t.{n} = s.{n}" for n in names)
    for attempt in range(1, RECORD_ATTEMPTS + 1):
        try:
            merge_frame(
                spark,
                frame,
                lambda view: (
                    f"MERGE INTO {log_table.identifier} t USING {view} s "
                    "ON t.run_id = s.run_id AND t.source_table = s.source_table "
                    f"WHEN MATCHED THEN UPDATE SET {updates} WHEN NOT MATCHED THEN INSERT *"
                ),
            )
            return
        except Exception as exc:
            if attempt == RECORD_ATTEMPTS or not is_commit_conflict(exc):
                raise

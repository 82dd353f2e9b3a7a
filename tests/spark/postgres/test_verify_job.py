"""The AWS verify job (glue/jobs/verify.py) against a real PostgreSQL reached through a Secrets Manager secret
(moto), publishing to CloudWatch (moto): silver loaded by the full-load job is recorded equal in cdclake_verify;
a difference planted in silver is recorded with its key and column, TablesDiffering=1 is published, and a retried
run replaces its rows instead of adding a second set. An unreachable source skips every table; the run succeeds.

The state machine's side (the job started after the full load, never stopping the loop) is
tests/aws/test_state_machine.py's; this test is the job's own, run as Glue runs its script (runpy, argv).
"""

from __future__ import annotations

import json
import runpy
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from conftest import SourceDatabase
from pyspark.sql import SparkSession

from cdclake.verify.log import VerifyRun

JOBS = Path(__file__).resolve().parents[3] / "glue" / "jobs"
SCHEMA = """
CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2), at timestamptz);
INSERT INTO items SELECT i, 'item ' || i, i * 1.5, timestamptz '2024-01-01 00:00:00+00' + i * interval '1 hour'
FROM generate_series(1, 400) AS i;
CREATE TABLE notes (body text, n int);
INSERT INTO notes SELECT 'note ' || (i % 7), i % 3 FROM generate_series(1, 50) AS i;
"""


@pytest.fixture
def aws_region() -> str:
    """The stack's region for this module's ``aws`` (spark/conftest.py): not moto's default one."""
    return "eu-west-1"


def _job(name: str) -> Callable[[list[str]], Any]:
    main: Callable[[list[str]], Any] = runpy.run_path(str(JOBS / f"{name}.py"), run_name=f"job_{name}")["main"]
    return main


def _job_arguments(source_db: SourceDatabase, tmp_path: Path, catalog: str) -> list[str]:
    """What the template gives every job, with local paths (local Spark writes no S3)."""
    return ["--config", str(source_db.config_path), "--bronze", str(source_db.bronze),
            "--warehouse", str(tmp_path / "warehouse"), "--catalog", catalog, "--database", "cdclake_dev"]  # fmt: skip


def _metric_sums(name: str) -> tuple[float, float]:
    """(sum, sample count) of the stack metric ``name`` over the last hour."""
    now = datetime.now(UTC)
    answer = boto3.client("cloudwatch").get_metric_statistics(
        Namespace="cdclake", MetricName=name, Dimensions=[{"Name": "Environment", "Value": "dev"}],
        StartTime=now - timedelta(hours=1), EndTime=now + timedelta(minutes=1), Period=7200,
        Statistics=["Sum", "SampleCount"],
    )  # fmt: skip
    points = answer["Datapoints"]
    return sum(p["Sum"] for p in points), sum(p["SampleCount"] for p in points)


def _lsn(text: str) -> int:
    """A PostgreSQL LSN (``0/16B3748``) as a number."""
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _current_lsn(source_db: SourceDatabase) -> int:
    conn = source_db.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        lsn = _lsn(cur.fetchone()[0])
    conn.close()
    return lsn


def _loaded(source_db: SourceDatabase, tmp_path: Path) -> tuple[str, list[str]]:
    """SCHEMA's tables captured as DMS files and loaded by the full-load job into a catalog of their own: the
    catalog's name and the jobs' shared arguments."""
    source_db.execute(SCHEMA)
    source_db.capture()
    catalog = f"job{uuid.uuid4().hex[:8]}"
    common = _job_arguments(source_db, tmp_path, catalog)
    _job("full_load")(["full_load.py", *common]).checked()
    return catalog, common


def _recorded(spark: SparkSession, catalog: str, run_id: str) -> dict[str, dict[str, Any]]:
    rows = spark.sql(f"SELECT * FROM {catalog}.cdclake_dev.cdclake_verify WHERE run_id = '{run_id}'").collect()
    return {r["source_table"]: r.asDict() for r in rows}


def test_the_verify_job_records_equal_then_names_a_planted_difference_and_publishes_it(
    aws: None, source_db: SourceDatabase, spark: SparkSession, tmp_path: Path
) -> None:
    # GIVEN a PostgreSQL source with a keyed and a keyless table, captured as DMS files and loaded by the full-load job
    catalog, common = _loaded(source_db, tmp_path)
    # AND the stack's source secret (RDS's format) naming that database
    secret = {"engine": "postgres", "host": "127.0.0.1", "port": source_db.server.port, "username": "postgres",
              "password": "", "dbname": source_db.name}  # fmt: skip
    boto3.client("secretsmanager").create_secret(Name="cdclake/source", SecretString=json.dumps(secret))
    # (a quiet source: a difference is confirmed once no file waits and 1 s has passed, not the stack's 120 s)
    verify = [*common, "--secret_id", "cdclake/source", "--source_engine", "postgres",
              "--metrics_namespace", "cdclake", "--environment", "dev", "--delivery_seconds", "1"]  # fmt: skip

    # WHEN the verify job runs
    before = _current_lsn(source_db)
    first: VerifyRun = _job("verify")(["verify.py", *verify, "--JOB_RUN_ID", "jr_first"])
    after = _current_lsn(source_db)

    # THEN cdclake_verify holds one row per table, each equal, with the source's row counts (read here from the source)
    recorded = _recorded(spark, catalog, "jr_first")
    assert sorted(recorded) == ["public.items", "public.notes"]
    conn = source_db.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM notes)")
        counts = dict(zip(["public.items", "public.notes"], cur.fetchone(), strict=True))
    conn.close()
    for table, row in recorded.items():
        assert (row["verdict"], row["rows_differing"], row["problem"]) == ("equal", 0, None), row
        assert row["source_rows"] == row["silver_rows"] == counts[table] and row["method"] == "checksums", row
        assert row["started"] <= row["finished"] and json.loads(row["sample_keys"]) == []
        assert before <= _lsn(row["source_position"]) <= after, row  # where the source's WAL stood
        assert row["source_clock"] is not None, row  # and its clock, which silver's commit times are compared with
    assert recorded["public.items"]["ranges_compared"] > 1 and recorded["public.items"]["rows_read"] == 0
    assert (first.summary.tables_differing, first.summary.tables_skipped) == (0, 0)
    assert _metric_sums("TablesDiffering") == (0.0, 1.0) and _metric_sums("TablesVerified") == (2.0, 1.0)

    # WHEN a difference is planted in silver (a change the pipeline never made) and the job runs again
    spark.sql(f"UPDATE {catalog}.cdclake_dev.items SET name = 'tampered' WHERE id = 123")
    _job("verify")(["verify.py", *verify, "--JOB_RUN_ID", "jr_second"])

    # THEN the run's row for items says which key differs, and in which column; notes stays equal
    recorded = _recorded(spark, catalog, "jr_second")
    items = recorded["public.items"]
    assert (items["verdict"], items["rows_differing"], items["ranges_differing"]) == ("differing", 1, 1)
    assert json.loads(items["sample_keys"]) == [{"key": "id=123", "kind": "different", "columns": ["name"]}]
    assert items["rows_read"] < 2 * counts["public.items"]  # only the differing range was read row by row
    assert recorded["public.notes"]["verdict"] == "equal"
    # AND TablesDiffering=1 and RowsDiffering=1 were published, one datapoint a run
    assert _metric_sums("TablesDiffering") == (1.0, 2.0) and _metric_sums("RowsDiffering") == (1.0, 2.0)

    # WHEN Glue retries that run (its attempt suffix) THEN its rows are replaced, not added
    _job("verify")(["verify.py", *verify, "--JOB_RUN_ID", "jr_second_attempt_1"])
    rows = spark.sql(f"SELECT run_id, source_table FROM {catalog}.cdclake_dev.cdclake_verify").collect()
    assert sorted((r["run_id"], r["source_table"]) for r in rows) == [
        ("jr_first", "public.items"), ("jr_first", "public.notes"),
        ("jr_second", "public.items"), ("jr_second", "public.notes"),
    ]  # fmt: skip
    # AND the table is Iceberg format v2 (what Athena reads)
    version = spark.sql(f"SHOW TBLPROPERTIES {catalog}.cdclake_dev.cdclake_verify ('format-version')").collect()
    assert version[0]["value"] == "2"


def test_an_unreachable_source_skips_every_table_and_the_run_succeeds(
    aws: None, source_db: SourceDatabase, spark: SparkSession, tmp_path: Path
) -> None:
    # GIVEN a loaded table and a secret naming a port nothing listens on
    catalog, common = _loaded(source_db, tmp_path)
    secret = {"engine": "postgres", "host": "127.0.0.1", "port": 1, "username": "u", "password": "p"}
    boto3.client("secretsmanager").create_secret(Name="cdclake/source", SecretString=json.dumps(secret))
    # WHEN the verify job runs
    run: VerifyRun = _job("verify")(["verify.py", *common, "--secret_id", "cdclake/source", "--JOB_RUN_ID", "jr_x",
                                     "--metrics_namespace", "cdclake", "--environment", "dev"])  # fmt: skip
    # THEN every table is recorded skipped with the reason (never the password), and TablesSkipped says how many
    recorded = _recorded(spark, catalog, "jr_x")
    assert sorted(recorded) == ["public.items", "public.notes"]
    for row in recorded.values():
        assert row["verdict"] == "skipped" and "Cannot connect to PostgreSQL" in row["problem"], row
        # the host and port, never the password nor the connection string that holds it
        assert "127.0.0.1:1" in row["problem"] and "'p'" not in row["problem"], row["problem"]
        assert "password" not in row["problem"], row["problem"]
    assert (run.summary.tables_skipped, run.summary.tables_differing) == (2, 0)
    assert _metric_sums("TablesSkipped") == (2.0, 1.0) and _metric_sums("TablesDiffering") == (0.0, 1.0)

"""The verify job in the deployed stack: a stack deployed with SourceSecretId, its secret naming
a real local PostgreSQL, as the source DMS loaded bronze from.

The stack is deployed into a moto server as tests/aws/test_deployed_stack.py deploys it (its `deploy`, the same
moto gap workarounds, the Glue entry points the upload step put in S3 run on local Spark). After the full load
the state machine starts the verify job; its cdclake_verify rows say every table is equal to PostgreSQL. A
difference planted in silver is then found by the next run (started as VerifySchedule's EventBridge Scheduler
starts it: glue:StartJobRun), its row names the key and column, and TablesDiffering=1 reaches CloudWatch (moto).

A module of its own (one deploy, with a source secret) so the other deployed tests keep a stack without one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from local_stack import REGION
from test_deployed_stack import (
    INITIAL,
    LOADED_AT,
    Deployed,
    deploy,
    every_call_allowed,
    local_aws,
)

from cdclake.dms.writer import csv_text
from local_databases import PgServer, running_postgres

pytestmark = [pytest.mark.spark, pytest.mark.stack]
__all__ = ["every_call_allowed"]  # the IAM harness's check after each test (autouse)

CONFIG = """\
bronze: {format: csv, csv_header: false, timestamp_column: ts}
silver: {database: people_db}
tables:
  s.people: {primary_key: [id], columns: {id: int, name: string, city: string}}
"""
SECRET = "cdclake/source"
# An environment of its own: the Glue entry points of both deployed modules run in one Spark session, whose
# "silver" catalog keeps the warehouse of the first module that opened it; another database keeps them apart.
ENVIRONMENT = "vfy"


@pytest.fixture(scope="module")
def source() -> Iterator[tuple[PgServer, str]]:
    """A PostgreSQL database holding s.people as DMS's full load found it (INITIAL)."""
    import psycopg2

    with running_postgres() as server:
        name = server.create_database()
        conn = psycopg2.connect(server.dsn(name))
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE SCHEMA s; CREATE TABLE s.people (id int PRIMARY KEY, name text, city text)")
            for row in INITIAL:
                cur.execute("INSERT INTO s.people VALUES (%s, %s, %s)", (int(row["id"]), row["name"], row["city"]))
        conn.close()
        yield server, name


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, source: tuple[PgServer, str]) -> Iterator[Deployed]:
    server, database = source
    with local_aws() as (endpoint, gaps, calls):
        work = tmp_path_factory.mktemp("deployed-verify")
        # The source secret as RDS writes one; the stack is given its name (SourceSecretId).
        secret = {"engine": "postgres", "host": "127.0.0.1", "port": server.port, "username": "postgres",
                  "password": "", "dbname": database}  # fmt: skip
        boto3.client("secretsmanager", region_name=REGION).create_secret(Name=SECRET, SecretString=json.dumps(secret))
        # A quiet source: a difference is confirmed 1 s after nothing waits (the default allows for DMS's 60 s).
        given = {"SourceSecretId": SECRET, "SourceEngine": "postgres", "EnvironmentName": ENVIRONMENT,
                 "VerifyDeliverySeconds": "1"}  # fmt: skip
        stack = deploy(work, endpoint, gaps, CONFIG, given, calls)
        yield stack
        stack.stop_all()


def verify_rows(deployed: Deployed) -> dict[str, list[dict[str, Any]]]:
    """cdclake_verify's rows by run id, each run's rows in table order."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    database = deployed.stack.outputs["GlueDatabaseName"]
    runs: dict[str, list[dict[str, Any]]] = {}
    for row in spark.table(f"silver.{database}.cdclake_verify").orderBy("started", "source_table").collect():
        runs.setdefault(row["run_id"], []).append(row.asDict())
    return runs


def verify_runs(deployed: Deployed) -> list[Any]:
    job = deployed.stack.outputs["VerifyJobName"]
    return [outcome for name, outcome in deployed.runs if name == job]


def metric(name: str) -> tuple[float, float]:
    """(sum, datapoints) of a verify metric of the stack's namespace over the last hour."""
    now = datetime.now(UTC)
    answer = boto3.client("cloudwatch", region_name=REGION).get_metric_statistics(
        Namespace="cdclake", MetricName=name, Dimensions=[{"Name": "Environment", "Value": ENVIRONMENT}],
        StartTime=now - timedelta(hours=1), EndTime=now + timedelta(minutes=1), Period=7200,
        Statistics=["Sum", "SampleCount"],
    )  # fmt: skip
    return sum(p["Sum"] for p in answer["Datapoints"]), sum(p["SampleCount"] for p in answer["Datapoints"])


def test_the_verify_job_runs_after_the_full_load_and_finds_a_difference_planted_in_silver(
    deployed: Deployed, tmp_path: Path
) -> None:
    # GIVEN DMS's full load of s.people in bronze, and the stack's pipeline started
    load = csv_text([[LOADED_AT, r["id"], r["name"], r["city"]] for r in INITIAL])
    deployed.s3.put_object(Bucket=deployed.bronze, Key="dms/s/people/LOAD00000001.csv", Body=load.encode())
    first = deployed.sfn.start_execution(
        stateMachineArn=deployed.stack.outputs["StateMachineArn"], name="first", input="{}"
    )["executionArn"]
    # WHEN the full load is in THEN the state machine starts the verify job and hands over without waiting for it
    deployed.wait(lambda: len(deployed.executions()) == 2, "the full-load execution hands over")
    assert deployed.states_entered(first)[-5:] == [
        "IsVerifyAfterFullLoad", "StartVerifyJob", "MarkFullLoadDone", "StartSuccessor", "HandedOver",
    ]  # fmt: skip
    deployed.wait(lambda: len(verify_runs(deployed)) == 1, "the verify run ended", timeout=300)
    [run] = verify_runs(deployed)
    assert not isinstance(run, Exception), run
    # AND its cdclake_verify row says s.people equals PostgreSQL, by checksums, with the source's row count
    [[row]] = verify_rows(deployed).values()
    assert (row["source_table"], row["verdict"], row["method"]) == ("s.people", "equal", "checksums"), row
    assert row["source_rows"] == row["silver_rows"] == len(INITIAL) and row["rows_differing"] == 0
    assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", row["source_position"]), row  # the source's WAL position (LSN)
    assert metric("TablesDiffering") == (0.0, 1.0) and metric("TablesSkipped") == (0.0, 1.0)

    # WHEN a value is changed in silver behind the pipeline's back, and the verify job is started as the schedule does
    from pyspark.sql import SparkSession

    database = deployed.stack.outputs["GlueDatabaseName"]
    SparkSession.builder.getOrCreate().sql(f"UPDATE silver.{database}.people SET city = 'Atlantis' WHERE id = 3")
    glue = boto3.client("glue", region_name=REGION)
    glue.start_job_run(JobName=deployed.stack.outputs["VerifyJobName"])
    deployed.wait(lambda: len(verify_runs(deployed)) == 2, "the second verify run ended", timeout=300)

    # THEN its row names the key and the column that differ, the first run's row is left as it was
    runs = verify_rows(deployed)
    [second] = [rows for rows in runs.values() if rows[0]["run_id"] != row["run_id"]]
    [differing] = second
    assert (differing["verdict"], differing["rows_differing"]) == ("differing", 1)
    assert json.loads(differing["sample_keys"]) == [{"key": "id=3", "kind": "different", "columns": ["city"]}]
    assert runs[row["run_id"]] == [row]
    # AND TablesDiffering=1 and RowsDiffering=1 reached CloudWatch, one datapoint a run (the alarm's metric)
    assert metric("TablesDiffering") == (1.0, 2.0) and metric("RowsDiffering") == (1.0, 2.0)
    alarm = deployed.stack.physical("VerifyDifferingAlarm")
    [described] = boto3.client("cloudwatch", region_name=REGION).describe_alarms(AlarmNames=[alarm])["MetricAlarms"]
    assert (described["Namespace"], described["MetricName"]) == ("cdclake", "TablesDiffering")
    assert described["AlarmActions"] == [deployed.stack.physical("AlertTopic")]
    # AND the CDC loop ran on beside the verify runs
    assert deployed.executions()[-1]["status"] == "RUNNING"


def test_a_reload_is_followed_by_a_verify_of_the_tables_it_loaded(deployed: Deployed) -> None:
    # GIVEN s.people loaded (the first test), and silver changed behind the pipeline's back
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    database = deployed.stack.outputs["GlueDatabaseName"]
    spark.sql(f"UPDATE silver.{database}.people SET city = 'Atlantis' WHERE id = 3")
    verified_before, rows_before = len(verify_runs(deployed)), verify_rows(deployed)
    # WHEN the full-load job reloads s.people, as the reload lane (or the runbook's hand reload) starts it
    glue = boto3.client("glue", region_name=REGION)
    glue.start_job_run(
        JobName=deployed.stack.outputs["FullLoadJobName"], Arguments={"--tables": "s.people", "--reload": "true"}
    )
    deployed.wait(lambda: len(verify_runs(deployed)) == verified_before + 1, "the verify after the reload", timeout=300)
    # THEN the reload started the verify job for exactly the table it loaded
    newest = max(glue.get_job_runs(JobName=deployed.stack.outputs["VerifyJobName"])["JobRuns"],
                 key=lambda run: run["StartedOn"])  # fmt: skip
    assert newest["Arguments"]["--tables"] == "s.people"  # (moto lists the job's default arguments with it)
    # AND its cdclake_verify row proves the reloaded table equal to PostgreSQL (the planted value is gone)
    [after] = [rows for run_id, rows in verify_rows(deployed).items() if run_id not in rows_before]
    assert [(r["source_table"], r["verdict"], r["rows_differing"]) for r in after] == [("s.people", "equal", 0)]
    assert spark.sql(f"SELECT city FROM silver.{database}.people WHERE id = 3").first()[0] != "Atlantis"


def test_the_source_and_verify_grants_were_used_by_the_verify_and_full_load_jobs(deployed: Deployed) -> None:
    """This stack's grants that the other deployed module's stack lacks (a source secret), seen used here; the
    least-privilege report (docs/iam.md) is that module's."""
    assert deployed.calls is not None
    used = {(g.role, g.statement, g.action) for g in deployed.calls.used}
    assert {
        ("VerifyJobRole", "SourceSecret", "secretsmanager:GetSecretValue"),
        ("VerifyJobRole", "ListBronze", "s3:ListBucket"),
        ("VerifyJobRole", "JobMetrics", "cloudwatch:PutMetricData"),
        ("FullLoadJobRole", "StartVerifyAfterReload", "glue:StartJobRun"),
        ("PipelineStateMachineRole", "RunGlueJobs", "glue:StartJobRun"),
    } <= used

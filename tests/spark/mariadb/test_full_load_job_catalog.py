"""The AWS full-load job reads the source catalog: the Glue connection (moto) gives the address,
the Secrets Manager secret (moto) the credentials, the database behind them is a real MariaDB.
With no configuration uploaded, the job writes it to the artifacts bucket and loads with it; with
one uploaded, it leaves it alone and logs the drift."""

from __future__ import annotations

import json
import runpy
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyspark.sql import SparkSession

from cdclake.config import parse_config
from cdclake.report import RunReport
from mariadb_dms import DmsTask, silver_rows, source_rows

JOBS = Path(__file__).resolve().parents[3] / "glue" / "jobs"
CONFIG_URI = "s3://artifacts/config/cdclake.yaml"


@pytest.fixture
def aws_region() -> str:
    """The stack's region for this module's ``aws`` (spark/conftest.py): not moto's default one."""
    return "eu-west-1"


def _full_load_job() -> Callable[[list[str]], RunReport]:
    main: Callable[[list[str]], RunReport] = runpy.run_path(str(JOBS / "full_load.py"), run_name="job_full_load")[
        "main"
    ]
    return main


def test_full_load_job_writes_the_configuration_from_the_catalog_then_reports_drift(
    aws: None, mariadb_server: Any, spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a MariaDB database with a keyed and a keyless table, and DMS's full-load files of them
    database = mariadb_server.create_database()
    conn = mariadb_server.connect(database)
    with conn.cursor() as cursor:
        cursor.execute("CREATE TABLE customers (id INT UNSIGNED PRIMARY KEY, name VARCHAR(40), since DATETIME(3))")
        cursor.execute("CREATE TABLE visits (at TIMESTAMP(6) NULL, page TEXT)")
        cursor.execute(
            "INSERT INTO customers VALUES (4294967295, 'Ana, \"A\"', '2024-02-29 10:00:00.123'), (1, NULL, NULL)"
        )
        cursor.execute("INSERT INTO visits VALUES ('2024-01-01 00:00:00.000001', '/'), (NULL, NULL)")
    bronze = tmp_path / "bronze"
    dms = DmsTask(conn, database, bronze)
    dms.full_load("customers")
    dms.full_load("visits")
    # AND the stack's secret (credentials only, as a DMS user's secret often is) and Glue JDBC connection
    secrets, glue, s3 = boto3.client("secretsmanager"), boto3.client("glue"), boto3.client("s3")
    s3.create_bucket(Bucket="artifacts", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    secrets.create_secret(Name="cdclake/source", SecretString=json.dumps({"username": "root", "password": ""}))
    glue.create_connection(
        ConnectionInput={
            "Name": "source-db",
            "ConnectionType": "JDBC",
            "ConnectionProperties": {"JDBC_CONNECTION_URL": f"jdbc:mysql://127.0.0.1:{mariadb_server.port}/{database}"},
        }
    )
    catalog = f"job{uuid.uuid4().hex[:8]}"
    argv = [
        "full_load.py",
        *("--config", CONFIG_URI, "--bronze", str(bronze), "--warehouse", str(tmp_path / "warehouse")),
        *("--catalog", catalog, "--database", "cdclake_dev"),
        *("--secret_id", "cdclake/source", "--source_connection", "source-db", "--source_engine", "mysql"),
    ]

    # WHEN the full-load job runs with nothing uploaded at --config
    report = _full_load_job()(argv)

    # THEN it wrote the configuration from the catalog to the artifacts bucket ...
    written = s3.get_object(Bucket="artifacts", Key="config/cdclake.yaml")["Body"].read().decode()
    config = parse_config(written)
    assert [t.source for t in config.tables] == [f"{database}.customers", f"{database}.visits"]
    assert config.table("customers").primary_key == ("id",) and config.table("visits").append_only
    # ... and loaded both tables with it: silver equals MariaDB
    assert sorted(t.table for t in report.tables) == [f"{database}.customers", f"{database}.visits"]
    for table in config.tables:
        silver = silver_rows(spark, f"{catalog}.cdclake_dev.{table.target}", table)
        assert silver == source_rows(conn, table), table.source

    # WHEN a column is added at the source and the job runs again
    with conn.cursor() as cursor:
        cursor.execute("ALTER TABLE customers ADD COLUMN tier TINYINT")
    caplog.clear()
    _full_load_job()(argv)
    # THEN the uploaded configuration is left as it was and the drift is logged
    assert s3.get_object(Bucket="artifacts", Key="config/cdclake.yaml")["Body"].read().decode() == written
    drift = [r.getMessage() for r in caplog.records if r.getMessage().startswith("source drift:")]
    assert drift == [f"source drift: {database}.customers: added column tier tinyint: a new nullable silver "
                     "column; declare its type in columns (handled by the engine)"]  # fmt: skip
    conn.close()


def test_full_load_job_without_a_configuration_and_an_unreachable_source_fails_in_one_sentence(
    aws: None, tmp_path: Path
) -> None:
    # GIVEN a secret naming a host nothing listens on, and no configuration uploaded
    boto3.client("s3").create_bucket(Bucket="artifacts", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    boto3.client("secretsmanager").create_secret(
        Name="src",
        SecretString=json.dumps(
            {"engine": "postgres", "host": "127.0.0.1", "port": 1, "username": "u", "password": "p"}
        ),
    )
    argv = ["full_load.py", "--config", CONFIG_URI, "--bronze", str(tmp_path), "--warehouse", str(tmp_path / "w")]
    # WHEN the job runs THEN it stops before loading anything, saying which source it could not reach
    from cdclake.sources.catalog.model import SourceCatalogError

    with pytest.raises(
        SourceCatalogError,
        match=r"^Cannot connect to PostgreSQL at 127\.0\.0\.1:1 \(database default\): nothing listens there",
    ):
        _full_load_job()([*argv, "--secret_id", "src"])

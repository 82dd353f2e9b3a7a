"""The full-load job's catalog step with moto (Secrets Manager, Glue, S3) and an in-memory catalog:
which address it connects to, when it writes the configuration, and when it only reports drift."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from cdclake.config import parse_config
from cdclake.ops.source_catalog import SourceSettings, source_address, sync_configuration
from cdclake.shells.glue_job import parse_arguments
from cdclake.sources.catalog.connect import SourceAddress
from cdclake.sources.catalog.model import CatalogColumn, CatalogTable, SourceCatalogError

URI = "s3://artifacts/config/cdclake.yaml"
ADDRESS = SourceAddress("postgres", "db.internal", 5432, "shop", "dms", "pw")
ORDERS = CatalogTable("sales", "orders", (CatalogColumn("id", "int8", "bigint"),), ("id",), "primary key")
LOG = CatalogTable("sales", "log", (CatalogColumn("line", "text", "string"),))


@pytest.fixture
def aws(aws_credentials: None) -> Iterator[None]:
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="artifacts")
        yield


def test_job_arguments_name_the_source_only_with_a_secret() -> None:
    common = ["job.py", "--config", "c", "--bronze", "b", "--warehouse", "w"]
    assert parse_arguments([*common, "--source_engine", "postgres"], "full_load").source is None
    given = [*common, "--secret_id", "s", "--source_connection", "c", "--dbname", "shop"]
    assert parse_arguments(given, "full_load").source == SourceSettings("s", "c", "shop", None)
    # only the full-load job reads the source
    assert parse_arguments(given, "cdc").source is None


def test_address_comes_from_the_connection_and_the_secret(aws: None) -> None:
    # GIVEN a secret with credentials and an old host, and a Glue JDBC connection
    secrets, glue = (
        boto3.client("secretsmanager", region_name="us-east-1"),
        boto3.client("glue", region_name="us-east-1"),
    )
    secrets.create_secret(Name="src", SecretString=json.dumps({"username": "dms", "password": "pw", "host": "old"}))
    glue.create_connection(
        ConnectionInput={
            "Name": "conn",
            "ConnectionType": "JDBC",
            "ConnectionProperties": {"JDBC_CONNECTION_URL": "jdbc:postgresql://db.internal:5432/app"},
        }
    )
    # WHEN the job resolves the address with the stack's database name
    address = source_address(SourceSettings("src", "conn", "shop", "postgres"), secrets, glue)
    # THEN host and port come from the connection, credentials from the secret, the database from the stack
    assert address == ADDRESS


def test_missing_secret_and_non_json_secret_are_one_sentence(aws: None) -> None:
    secrets = boto3.client("secretsmanager", region_name="us-east-1")
    with pytest.raises(SourceCatalogError, match="The secret nope cannot be read"):
        source_address(SourceSettings("nope"), secrets, None)
    secrets.create_secret(Name="plain", SecretString="hunter2")
    with pytest.raises(SourceCatalogError, match="does not hold a JSON database secret"):
        source_address(SourceSettings("plain"), secrets, None)


def test_configuration_written_once_then_drift_reported(aws: None, caplog: pytest.LogCaptureFixture) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    # WHEN nothing was uploaded THEN the configuration is written from the catalog
    sync = sync_configuration(URI, ADDRESS, "cdclake_dev", s3, read=lambda _a: [LOG, ORDERS])
    text = s3.get_object(Bucket="artifacts", Key="config/cdclake.yaml")["Body"].read().decode()
    config = parse_config(text)
    assert (sync.outcome, sync.tables) == ("written", 2)
    assert config.database == "cdclake_dev" and config.table("sales.log").append_only
    # WHEN the catalog has not changed THEN it is in step and left alone
    assert sync_configuration(URI, ADDRESS, None, s3, read=lambda _a: [LOG, ORDERS]).outcome == "in step"
    # WHEN a table is added at the source THEN the drift is reported and the file is not touched
    new = CatalogTable("sales", "refunds", (CatalogColumn("id", "int4", "int"),), ("id",), "primary key")
    sync = sync_configuration(URI, ADDRESS, None, s3, read=lambda _a: [LOG, ORDERS, new])
    assert sync.outcome == "drift" and [d.kind for d in sync.drift] == ["new table"]
    assert s3.get_object(Bucket="artifacts", Key="config/cdclake.yaml")["Body"].read().decode() == text
    assert any("source drift: sales.refunds: new table" in r.getMessage() for r in caplog.records)

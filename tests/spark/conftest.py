"""One local Spark session with an Iceberg catalog for all Spark tests; each test gets its own
database and bronze directory so tests never see each other's tables."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import jvm_options  # noqa: F401  (sets the JVM options of every Spark session this process starts)
from cdclake.config import DEFAULT_CATALOG, PipelineConfig, parse_config
from cdclake.context import Engine
from cdclake.dms.store import BronzeStore, LocalBronze
from cdclake.runtime.session import LocalCatalog, SessionSettings, build_spark_session
from local_databases import MariaServer, PgServer, running_mariadb, running_postgres

CACHE_DIR = Path.home() / ".cache" / "cdclake"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark" in str(item.fspath):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    warehouse = tmp_path_factory.mktemp("warehouse")
    session = build_spark_session(
        SessionSettings(
            LocalCatalog(
                warehouse=warehouse,
                cache_dir=CACHE_DIR,
                shuffle_partitions=2,
                jvm_options=os.environ["CDCLAKE_JVM_OPTIONS"],  # set for every test process (tests/jvm_options.py)
            )
        )
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL server (tests/spark/postgres): started at its first use."""
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaServer]:
    """The session's MariaDB server (tests/spark/mariadb): started at its first use."""
    with running_mariadb() as server:
        yield server


@pytest.fixture(autouse=True)
def default_catalog(request: pytest.FixtureRequest) -> Iterator[None]:
    """Give the shared session back its default catalog after a test that ran a Glue job entry
    point with a catalog of its own (the job's session settings switch it for the session)."""
    yield
    if "spark" in request.fixturenames:
        request.getfixturevalue("spark").conf.set("spark.sql.defaultCatalog", DEFAULT_CATALOG)


@pytest.fixture
def aws_region() -> str:
    """The region of the fake AWS account (a module overrides this fixture to work in another)."""
    return "us-east-1"


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch, aws_region: str) -> None:
    """Fake credentials and one region for every boto3 client the test and its jobs make."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", aws_region)


@pytest.fixture
def aws(aws_credentials: None) -> Iterator[None]:
    """``aws_credentials``, and moto (never real AWS) behind every boto3 client for the whole test."""
    from moto import mock_aws  # here: most Spark tests never make an AWS client

    with mock_aws():
        yield


EngineFactory = Callable[..., Engine]


@pytest.fixture
def make_engine(spark: SparkSession, tmp_path: Path) -> EngineFactory:
    """Build an engine from YAML text; the bronze root is ``tmp_path / 'bronze'`` unless a store is given."""

    def build(config_text: str, store: BronzeStore | None = None) -> Engine:
        config: PipelineConfig = parse_config(config_text, "test.yaml")
        database = f"db_{uuid.uuid4().hex[:10]}"
        bronze = tmp_path / "bronze"
        bronze.mkdir(exist_ok=True)
        config = replace(config, database=database, bronze=replace(config.bronze, path=str(bronze)))
        return Engine(spark=spark, config=config, store=store or LocalBronze(bronze))

    return build

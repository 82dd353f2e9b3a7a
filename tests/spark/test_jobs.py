"""The AWS Glue entry points, run under plain PySpark (argparse fallback) against a local
warehouse, with bronze on a local directory and on S3 (moto)."""

from __future__ import annotations

import runpy
import uuid
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from pyspark.sql import SparkSession

from cdclake.dms.manifest import ManifestEntry, write_manifest
from cdclake.report import RunReport
from cdclake.shells import demo
from oracle import replay_change_log

JOBS = Path(__file__).resolve().parents[2] / "glue" / "jobs"


def _job(name: str) -> Callable[[list[str]], RunReport]:
    main: Callable[[list[str]], RunReport] = runpy.run_path(str(JOBS / f"{name}.py"), run_name=f"job_{name}")["main"]
    return main


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    yield


def _demo_config(tmp_path: Path) -> Path:
    config = tmp_path / "hosts.yaml"
    config.write_text(resources.files("cdclake.examples").joinpath("hosts.yaml").read_text("utf-8"))
    return config


def _silver(spark: SparkSession, catalog: str) -> list[dict[str, Any]]:
    rows = spark.table(f"{catalog}.airbnb.hosts_silver").drop("_cdc_order").orderBy("id").collect()
    return [r.asDict() for r in rows]


def test_glue_jobs_apply_a_manifest_from_local_bronze(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN the demo's DMS files and a manifest naming the CDC files (full paths)
    bronze = tmp_path / "bronze"
    demo.write_full_load(bronze, demo.initial_rows())
    batches = demo.cdc_batches()
    cdc_files = [demo.write_cdc_batch(bronze, batch) for batch in batches]
    manifest = tmp_path / "manifest.json"
    manifest.write_text(write_manifest([ManifestEntry(str(p), p.stat().st_size) for p in cdc_files]))
    catalog = f"job{uuid.uuid4().hex[:8]}"
    common = ["--config", str(_demo_config(tmp_path)), "--bronze", str(bronze)]
    common += ["--warehouse", str(tmp_path / "warehouse"), "--catalog", catalog]
    # WHEN the full-load job and then the CDC job run, and the CDC job runs again (a retry)
    loaded = _job("full_load")(["full_load.py", *common])
    applied = _job("cdc")(["cdc.py", *common, "--manifest", str(manifest)])
    retried = _job("cdc")(["cdc.py", *common, "--manifest", str(manifest)])
    # THEN silver equals the replayed source, the batch was one commit, and the retry is a no-op
    expected = demo.expected_silver(
        replay_change_log(demo.initial_rows(), [c for b in batches for c in b], ["id"]).values()
    )
    assert demo.differences(_silver(spark, catalog), expected) == []
    assert loaded.tables[0].files_applied == 11
    assert [(t.files_applied, t.files_skipped) for t in applied.tables] == [(3, 0)]
    assert [(t.files_applied, t.files_skipped) for t in retried.tables] == [(0, 3)]
    kinds = spark.sql(
        f"SELECT summary['cdclake.kind'] AS kind FROM {catalog}.airbnb.hosts_silver.snapshots ORDER BY committed_at"
    ).collect()
    assert [r["kind"] for r in kinds] == ["full-load-staged", "full-load", "cdc"]
    # AND a replay of the same manifest applies the files again and changes no row
    replayed = _job("cdc")(["cdc.py", *common, "--manifest", str(manifest), "--replay", "true"])
    assert [t.files_applied for t in replayed.tables] == [3]
    assert demo.differences(_silver(spark, catalog), expected) == []
    # AND the maintenance job compacts the table and keeps its rows
    maintained = _job("maintain")(["maintain.py", *common, "--retain_last_snapshots", "1"])
    silver = maintained.tables
    assert [(m.table, m.data_files_after <= m.data_files_before) for m in silver] == [("public.hosts_demo", True)]
    assert demo.differences(_silver(spark, catalog), expected) == []


def test_glue_cdc_job_reads_bronze_from_s3(spark: SparkSession, tmp_path: Path, aws_credentials: None) -> None:
    # GIVEN the demo's files uploaded to an S3 bronze prefix (moto) and an s3:// manifest
    local = tmp_path / "files"
    demo.write_full_load(local, demo.initial_rows())
    batches = demo.cdc_batches()
    for batch in batches:
        demo.write_cdc_batch(local, batch)
    catalog = f"job{uuid.uuid4().hex[:8]}"
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="bronze")
        entries = []
        for path in sorted(local.rglob("*.csv")):
            key = f"dms/{path.relative_to(local).as_posix()}"
            s3.upload_file(str(path), "bronze", key)
            if not path.name.startswith("LOAD"):
                entries.append(ManifestEntry(f"s3://bronze/{key}", path.stat().st_size))
        s3.put_object(Bucket="bronze", Key="manifests/m1.json", Body=write_manifest(entries).encode())
        common = ["--config", str(_demo_config(tmp_path)), "--bronze", "s3://bronze/dms"]
        common += ["--warehouse", str(tmp_path / "warehouse"), "--catalog", catalog]
        # WHEN the jobs run with the manifest on S3
        _job("full_load")(["full_load.py", *common])
        report = _job("cdc")(["cdc.py", *common, "--manifest", "s3://bronze/manifests/m1.json"])
    # THEN the batch is applied from S3 and silver equals the replayed source
    assert [t.files_applied for t in report.tables] == [3]
    expected = demo.expected_silver(
        replay_change_log(demo.initial_rows(), [c for b in batches for c in b], ["id"]).values()
    )
    assert demo.differences(_silver(spark, catalog), expected) == []


def test_demo_reports_success_against_the_oracle(spark: SparkSession, tmp_path: Path, capsys: Any) -> None:
    # GIVEN the demo with an engine on the shared session (a fresh database)

    from cdclake.config import load_config
    from cdclake.context import Engine
    from cdclake.dms.store import LocalBronze

    def make_engine(config_path: Path, bronze: str) -> Engine:
        config = load_config(config_path)
        config = config.in_database(f"demo_{uuid.uuid4().hex[:8]}")
        return Engine(spark=spark, config=config, store=LocalBronze(Path(bronze)))

    # WHEN it runs
    code = demo.run_demo(tmp_path / "demo", make_engine)
    # THEN it ends with the verification line and exit code 0
    output = capsys.readouterr().out
    assert code == 0
    assert "silver equals the expected source state (23 rows): OK" in output

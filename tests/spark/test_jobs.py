"""The AWS Glue entry points, run under plain PySpark (argparse fallback) against a local
warehouse, with bronze on a local directory and on S3 (moto)."""

from __future__ import annotations

import runpy
import uuid
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws
from pyspark.sql import SparkSession

from cdclake.dms.manifest import ManifestEntry, write_manifest
from cdclake.report import RunReport
from cdclake.shells import demo
from configs import keyed_tables
from oracle import replay_change_log

JOBS = Path(__file__).resolve().parents[2] / "glue" / "jobs"


def _job(name: str) -> Callable[[list[str]], RunReport]:
    main: Callable[[list[str]], RunReport] = runpy.run_path(str(JOBS / f"{name}.py"), run_name=f"job_{name}")["main"]
    return main


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


LANES = keyed_tables("s.items", "s.other")


def test_the_cdc_job_leaves_a_reload_to_the_full_load_job_through_its_request(
    spark: SparkSession, tmp_path: Path, aws_credentials: None
) -> None:
    import json

    from cdclake.dms.writer import write_csv

    config = tmp_path / "lanes.yaml"
    config.write_text(LANES)
    catalog = f"job{uuid.uuid4().hex[:8]}"
    day1, day2, day3 = "2024-01-01 00:00:00.000000", "2024-01-02 00:00:00.000000", "2024-01-03 00:00:00.000000"
    with mock_aws():
        s3, sqs = boto3.client("s3"), boto3.client("sqs")
        s3.create_bucket(Bucket="bronze")
        queue = sqs.create_queue(QueueName="files")["QueueUrl"]

        def put(key: str, rows: list[list[str | None]]) -> None:
            write_csv(tmp_path / "files" / key, rows)
            s3.upload_file(str(tmp_path / "files" / key), "bronze", f"dms/{key}")

        def request() -> Any:
            return json.loads(s3.get_object(Bucket="bronze", Key="state/reloads.json")["Body"].read())

        common = ["--config", str(config), "--bronze", "s3://bronze/dms", "--warehouse", str(tmp_path / "wh")]
        common += ["--catalog", catalog]
        cdc = ["cdc.py", *common, "--queue_url", queue, "--poll_seconds", "0.2", "--idle_seconds", "0"]
        cdc += ["--reload_requests", "s3://bronze/state/reloads.json"]
        # GIVEN both tables loaded by the full-load job and changed by the CDC job
        for table in ("items", "other"):
            put(f"s/{table}/LOAD00000001.csv", [[day1, "1", "a"], [day1, "2", "b"]])
            put(f"s/{table}/20240102-0000000000.csv", [["U", day2, "1", "a2"]])
        _job("full_load")(["full_load.py", *common])
        _job("cdc")(cdc)
        assert request()["tables"] == []
        # WHEN a DMS reload of s.items arrives (its LOAD file written again, a CDC file after it) while
        # s.other receives a CDC file, and the CDC job runs
        put("s/items/LOAD00000001.csv", [[day3, "1", "r1"], [day3, "3", "r3"]])
        put("s/items/20240103-1200000000.csv", [["U", "2024-01-03 12:00:00.000000", "3", "r3b"]])
        put("s/other/20240103-0000000000.csv", [["U", day3, "2", "b3"]])
        followed = _job("cdc")(cdc)
        # THEN it applied s.other's file, loaded nothing, and asked for s.items's reload, with why
        assert followed.failures == {}
        assert request()["tables"] == ["s.items"]
        assert request()["reasons"]["s.items"].startswith("a reload: LOAD files written again")
        rows = {
            t: {r["id"]: r["name"] for r in spark.table(f"{catalog}.cdclake.{t}").collect()} for t in ("items", "other")
        }
        assert rows == {"items": {1: "a2", 2: "b"}, "other": {1: "a2", 2: "b3"}}
        # WHEN the full-load job runs for the tables asked for, and then the CDC job again
        loaded = _job("full_load")(["full_load.py", *common, "--tables", ",".join(request()["tables"])])
        _job("cdc")(cdc)
        # THEN the reload replaced s.items, its later CDC file was applied once, and the request is cleared
        assert [(t.table, t.kind) for t in loaded.tables] == [("s.items", "full-load")]
        assert _rows(spark, catalog, "items") == {1: "r1", 3: "r3b"}
        assert request()["tables"] == []


def _rows(spark: SparkSession, catalog: str, table: str) -> dict[int, str]:
    return {r["id"]: r["name"] for r in spark.table(f"{catalog}.cdclake.{table}").collect()}

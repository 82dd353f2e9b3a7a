"""The state machine's batches end to end, locally: S3 "Object Created" events on a FIFO queue
(moto) -> the dequeue function's manifest -> the CDC Glue job code on local Spark -> the ack
function; silver must equal the replayed source and the queue must end empty."""

from __future__ import annotations

import runpy
import sys
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from pyspark.sql import SparkSession

from cdclake.shells import demo
from oracle import replay_change_log
from s3_events import object_created_event

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def lambda_logic(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The two functions' logic modules, imported as the Lambda runtime does (their folder on the path)."""
    for name in ("dequeue_batch", "ack_batch"):
        monkeypatch.syspath_prepend(str(ROOT / "functions" / name))
    import batch_ack
    import batch_manifest

    yield batch_manifest, batch_ack
    for module in ("batch_ack", "batch_manifest"):
        sys.modules.pop(module, None)


def test_dequeued_manifests_drive_the_cdc_job(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lambda_logic: tuple[Any, Any]
) -> None:
    batch_manifest, batch_ack = lambda_logic
    for key, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    # GIVEN the demo's DMS files written to S3 bronze, each announced on the FIFO queue
    local = tmp_path / "files"
    demo.write_full_load(local, demo.initial_rows())
    batches = demo.cdc_batches()
    for batch in batches:
        demo.write_cdc_batch(local, batch)
    config = tmp_path / "hosts.yaml"
    config.write_text(resources.files("cdclake.examples").joinpath("hosts.yaml").read_text("utf-8"))
    catalog = f"sm{uuid.uuid4().hex[:8]}"
    jobs = {name: runpy.run_path(str(ROOT / "glue" / "jobs" / f"{name}.py"))["main"] for name in ("full_load", "cdc")}
    with mock_aws():
        s3, sqs = boto3.client("s3"), boto3.client("sqs")
        for bucket in ("bronze", "artifacts"):
            s3.create_bucket(Bucket=bucket)
        url = sqs.create_queue(
            QueueName="files.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
        )["QueueUrl"]
        for path in sorted(local.rglob("*.csv")):
            key = f"dms/{path.relative_to(local).as_posix()}"
            s3.upload_file(str(path), "bronze", key)
            sqs.send_message(
                QueueUrl=url, MessageBody=object_created_event("bronze", key, path.stat().st_size), MessageGroupId="dms"
            )
        common = ["--config", str(config), "--bronze", "s3://bronze/dms", "--warehouse", str(tmp_path / "wh")]
        common += ["--catalog", catalog]
        settings = batch_manifest.BatchSettings(queue_url=url, manifest_bucket="artifacts", max_files=2)
        # WHEN the full load runs, then the loop dequeues, applies and acknowledges until the queue is empty
        jobs["full_load"](["full_load.py", *common])
        applied, iteration = [], 0
        while True:
            batch = batch_manifest.dequeue_batch(sqs, s3, settings, "run-1", iteration)
            if batch["manifestUri"]:
                report = jobs["cdc"](["cdc.py", *common, "--manifest", batch["manifestUri"]])
                applied += [t.files_applied for t in report.tables]
            if batch["receiptHandles"]:
                batch_ack.acknowledge(sqs, url, batch["receiptHandles"])
            elif not batch["manifestUri"]:
                break
            iteration += 1
        left = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    # THEN the three CDC files were applied once each, the queue is empty, silver equals the source
    assert sum(applied) == 3
    assert (left["ApproximateNumberOfMessages"], left["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")
    rows = spark.table(f"{catalog}.airbnb.hosts_silver").drop("_cdc_order").orderBy("id").collect()
    expected = demo.expected_silver(
        replay_change_log(demo.initial_rows(), [c for b in batches for c in b], ["id"]).values()
    )
    assert demo.differences([r.asDict() for r in rows], expected) == []

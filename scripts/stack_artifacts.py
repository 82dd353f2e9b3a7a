"""What `make deploy` and `make destroy` do with the stack's buckets after `sam deploy` / before it is gone.

    upload         the Glue entry points (glue/jobs/*.py) and the cdclake wheel (dist/) to s3://<artifacts>/glue/,
                   and with --config the table configuration to s3://<artifacts>/<TableConfigKey>
    stop-executions  stop the state machine's running executions (before the stack is deleted)
    delete-bucket  empty a versioned bucket (every version and delete marker) and delete it
    retained       list what deleting the stack kept

Runs with the SAM CLI's Python (boto3 is one of its dependencies), so deploying needs no `make setup`.
The stack outputs come from `sam list stack-outputs --output json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RETAINED = {
    "SilverBucketName": "the Iceberg warehouse",
    "BronzeBucketName": "the DMS files",
    "AccessLogBucketName": "S3 access logs",
    "GlueDatabaseName": "the silver tables' Glue database",
}


class DeployError(RuntimeError):
    """A deploy step that cannot go on; the message says what to do."""


def read_outputs(path: Path) -> dict[str, str]:
    """``sam list stack-outputs --output json`` as {OutputKey: OutputValue}."""
    try:
        listed = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DeployError(f"{path} is not what `sam list stack-outputs --output json` writes: {exc}") from None
    return {o["OutputKey"]: o["OutputValue"] for o in listed}


def upload(s3: Any, outputs: dict[str, str], root: Path, config: Path | None) -> list[str]:
    """Upload the Glue entry points, the wheel and (optionally) the table configuration; the s3:// URIs written."""
    bucket = outputs["ArtifactsBucketName"]
    wheels = sorted((root / "dist").glob("cdclake-*.whl"))
    if not wheels:
        raise DeployError("no dist/cdclake-*.whl: build it first (make deploy-wheel).")
    written = []
    for path in [*sorted((root / "glue" / "jobs").glob("*.py")), *wheels]:
        key = f"glue/{path.name}"
        s3.upload_file(str(path), bucket, key)
        written.append(f"s3://{bucket}/{key}")
    if config is not None:
        if not config.is_file():
            raise DeployError(f"CONFIG={config}: no such file.")
        key = outputs["TableConfigKey"]
        s3.upload_file(str(config), bucket, key)
        written.append(f"s3://{bucket}/{key}")
    return written


def empty_and_delete_bucket(s3: Any, bucket: str) -> int:
    """Delete every object version and delete marker of ``bucket``, then the bucket; the number of versions removed.

    A versioned bucket cannot be deleted while it holds versions, and deleting the current objects leaves them.
    """
    removed = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        entries = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
        ]
        for start in range(0, len(entries), 1000):  # DeleteObjects takes at most 1,000 keys
            chunk = entries[start : start + 1000]
            response = s3.delete_objects(Bucket=bucket, Delete={"Objects": chunk, "Quiet": True})
            if response.get("Errors"):
                raise DeployError(f"s3://{bucket}: {len(response['Errors'])} versions could not be deleted.")
            removed += len(chunk)
    s3.delete_bucket(Bucket=bucket)
    return removed


def stop_executions(sfn: Any, state_machine_arn: str) -> list[str]:
    """Stop every running execution of the pipeline (its loop never ends by itself); the ARNs stopped."""
    stopped = []
    for page in sfn.get_paginator("list_executions").paginate(
        stateMachineArn=state_machine_arn, statusFilter="RUNNING"
    ):
        for execution in page["executions"]:
            sfn.stop_execution(executionArn=execution["executionArn"], cause="make destroy")
            stopped.append(execution["executionArn"])
    return stopped


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["upload", "stop-executions", "delete-bucket", "retained"])
    parser.add_argument("--outputs", type=Path, required=True, help="sam list stack-outputs --output json")
    parser.add_argument("--config", type=Path, help="upload: the table configuration (cdclake.yaml)")
    parser.add_argument("--output-key", help="delete-bucket: the stack output naming the bucket")
    args = parser.parse_args(argv)
    try:
        outputs = read_outputs(args.outputs)
        if args.action == "retained":
            for key, what in RETAINED.items():
                if key in outputs:
                    print(f"kept: {outputs[key]} ({what})")
            return 0
        import boto3

        s3 = boto3.client("s3")
        if args.action == "upload":
            for uri in upload(s3, outputs, ROOT, args.config):
                print(f"uploaded {uri}")
            if args.config is None:
                print(
                    f"no CONFIG given: the jobs read s3://{outputs['ArtifactsBucketName']}/{outputs['TableConfigKey']}"
                )
        elif args.action == "stop-executions":
            for arn in stop_executions(boto3.client("stepfunctions"), outputs["StateMachineArn"]):
                print(f"stopped {arn}")
        else:
            bucket = outputs[args.output_key]
            print(f"deleted s3://{bucket} ({empty_and_delete_bucket(s3, bucket)} object versions)")
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`make try-aws`: the AWS stack deployed to a local emulator, the demo's DMS files through it, no account needed.

The same local deploy as the deployed-stack test (tests/aws/test_deployed_stack.py): `sam build`, `sam package`,
the SAM transform, the stack created in an in-process moto server, the project's preflight and upload steps.
Then the demo's files (the Airbnb hosts example, `make demo`) are put into the stack's bronze bucket: the rule
queues the CDC files, the state machine runs the full-load job, hands over, and applies the CDC batches through
the Lambda handlers and the Glue entry points on local Spark. Prints each execution's path and the silver table.
What the emulator cannot show (IAM evaluation, KMS, Lake Formation, a real Glue run): docs/deploy.md.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "aws"), str(ROOT / "tests")]


def main() -> int:
    import boto3
    import pytest
    from conftest import patch_moto_gaps
    from local_stack import FAKE_CREDENTIALS, REGION, SAM, moto_server
    from test_deployed_stack import Deployed, deploy

    from cdclake.columns import SILVER_ORDER
    from cdclake.shells.demo import (
        TABLE_DIR,
        cdc_batches,
        differences,
        expected_silver,
        final_source_rows,
        initial_rows,
        write_cdc_batch,
        write_full_load,
    )

    if not SAM.exists():
        print("error: the SAM CLI is missing: run `make aws-tools` first.", file=sys.stderr)
        return 1
    for noisy in ("werkzeug", "moto", "cdclake", "py4j", "botocore"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    example = (ROOT / "glue" / "cdclake" / "examples" / "hosts.yaml").read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="cdclake-try-aws-") as scratch, pytest.MonkeyPatch.context() as patch:
        work = Path(scratch)
        for name, value in {
            **FAKE_CREDENTIALS,
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "ERROR",
        }.items():
            patch.setenv(name, value)
        gaps = patch_moto_gaps(patch)
        with moto_server() as endpoint:
            patch.setenv("AWS_ENDPOINT_URL", endpoint)
            print(f"try-aws: deploying the stack to a local emulator at {endpoint} (sam build, package, transform)")
            started = time.monotonic()
            deployed: Deployed = deploy(work, endpoint, gaps, config_text=example)
            logging.getLogger("cdclake").setLevel(logging.ERROR)
            outputs = deployed.stack.outputs
            print(f"try-aws: stack {deployed.stack.name} created ({time.monotonic() - started:.0f}s): "
                  f"bronze s3://{outputs['BronzeBucketName']}, state machine {outputs['StateMachineArn']}")  # fmt: skip
            files = work / "demo-bronze"
            write_full_load(files, initial_rows())
            for path in sorted((files / TABLE_DIR).glob("LOAD*")):
                deployed.s3.upload_file(str(path), outputs["BronzeBucketName"], f"dms/{path.relative_to(files)}")
            print("try-aws: full-load files in bronze; starting the pipeline (it waits for DMS, runs the full load)")
            deployed.sfn.start_execution(stateMachineArn=outputs["StateMachineArn"], name="try-aws", input="{}")
            deployed.wait(lambda: len(deployed.executions()) == 2, "the full-load execution hands over", timeout=600)
            for batch in cdc_batches():
                path = write_cdc_batch(files, batch)
                deployed.s3.upload_file(str(path), outputs["BronzeBucketName"], f"dms/{path.relative_to(files)}")
                print(f"try-aws: DMS wrote dms/{path.relative_to(files)}")
            glue = boto3.client("glue", region_name=REGION)

            def applied() -> bool:
                runs = glue.get_job_runs(JobName=outputs["CdcJobName"])["JobRuns"]
                return (
                    deployed.queue_counts() == (0, 0)
                    and bool(runs)
                    and all(r["JobRunState"] in ("SUCCEEDED", "FAILED") for r in runs)
                )

            deployed.wait(applied, "the CDC files applied", timeout=600)
            print("\nexecutions:")
            for execution in deployed.executions():
                path = deployed.states_entered(execution["executionArn"])
                print(f"  {execution['name']} ({execution['status']}): {' > '.join(path)}")
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.getOrCreate()
            table = spark.table(f"silver.{outputs['GlueDatabaseName']}.hosts_silver").drop(SILVER_ORDER).orderBy("id")
            print(f"\nsilver table silver.{outputs['GlueDatabaseName']}.hosts_silver:")
            table.show(truncate=False)
            problems = differences([r.asDict() for r in table.collect()], expected_silver(final_source_rows()))
            alerts = deployed.alerts()
            deployed.stop_all()
            if problems or alerts:
                print("try-aws: silver differs from the source:" if problems else "try-aws: alerts were sent:")
                for line in problems or [a["Message"] for a in alerts]:
                    print(f"  {line}")
                return 1
            print("try-aws: silver equals the source's final state; no alert was sent.")
            return 0


if __name__ == "__main__":
    sys.exit(main())

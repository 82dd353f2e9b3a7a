"""`make try-aws`: the AWS stack deployed to a local emulator, the demo's DMS files through it, no account needed.

The same local deploy as the deployed-stack test (tests/aws/test_deployed_stack.py): `sam build`, `sam package`,
the SAM transform, the stack created in an in-process moto server, the project's preflight and upload steps.
Then the demo's files (the Airbnb hosts example, `make demo`) are put into the stack's bronze bucket: the rule
queues the CDC files, the state machine runs the full-load job, hands over, and applies the CDC batches through
the Lambda handlers and the Glue entry points on local Spark. Prints its steps, each execution's path, the whole
silver table and the verdict; everything else (the emulator's warnings, the handlers' metric lines, Spark's output)
goes to .cdclake/try-aws.log, whose path it prints.
What the emulator cannot show (IAM evaluation, KMS, Lake Formation, a real Glue run): docs/deploy.md.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "aws"), str(ROOT / "tests"), str(ROOT / "scripts")]
LOG = ROOT / ".cdclake" / "try-aws.log"

if TYPE_CHECKING:
    from try_aws_story import Story


def main() -> int:
    from local_stack import SAM
    from try_aws_story import told_apart

    if not SAM.exists():
        print("error: the SAM CLI is missing: run `make aws-tools` first.", file=sys.stderr)
        return 1
    LOG.unlink(missing_ok=True)
    print(f"try-aws: everything but these lines (emulator warnings, metric lines, Spark output) goes to {LOG}")
    try:
        with told_apart(LOG) as story:
            code = _try(story)
    except Exception as error:  # the traceback to the log, one line to the terminal
        import traceback

        with LOG.open("a", encoding="utf-8") as log:
            traceback.print_exc(file=log)
        print(f"try-aws: failed: {type(error).__name__}: {error}; the whole log: {LOG}", file=sys.stderr)
        return 1
    if code:
        print(f"try-aws: failed; the whole log: {LOG}", file=sys.stderr)
    return code


def _try(story: Story) -> int:
    import boto3
    import pytest
    from conftest import patch_moto_gaps
    from local_stack import FAKE_CREDENTIALS, REGION, moto_server
    from test_deployed_stack import Deployed, deploy
    from try_aws_story import executions_text, silver_text, verdict

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
            story.say(f"try-aws: deploying the stack to a local emulator at {endpoint} (sam build, package, transform)")
            started = time.monotonic()
            deployed: Deployed = deploy(work, endpoint, gaps, config_text=example)
            logging.getLogger("cdclake").setLevel(logging.ERROR)
            outputs = deployed.stack.outputs
            took = time.monotonic() - started
            bronze, machine = outputs["BronzeBucketName"], outputs["StateMachineArn"]
            story.say(
                f"try-aws: stack {deployed.stack.name} created ({took:.0f}s): "
                f"bronze s3://{bronze}, state machine {machine}"
            )
            files = work / "demo-bronze"
            write_full_load(files, initial_rows())
            for path in sorted((files / TABLE_DIR).glob("LOAD*")):
                deployed.s3.upload_file(str(path), outputs["BronzeBucketName"], f"dms/{path.relative_to(files)}")
            story.say(
                "try-aws: full-load files in bronze; starting the pipeline (it waits for DMS, runs the full load)"
            )
            deployed.sfn.start_execution(stateMachineArn=outputs["StateMachineArn"], name="try-aws", input="{}")
            deployed.wait(lambda: len(deployed.executions()) == 2, "the full-load execution hands over", timeout=600)
            for batch in cdc_batches():
                path = write_cdc_batch(files, batch)
                deployed.s3.upload_file(str(path), outputs["BronzeBucketName"], f"dms/{path.relative_to(files)}")
                story.say(f"try-aws: DMS wrote dms/{path.relative_to(files)}")
            glue = boto3.client("glue", region_name=REGION)

            def applied() -> bool:
                runs = glue.get_job_runs(JobName=outputs["CdcJobName"])["JobRuns"]
                return (
                    deployed.queue_counts() == (0, 0)
                    and bool(runs)
                    and all(r["JobRunState"] in ("SUCCEEDED", "FAILED") for r in runs)
                )

            deployed.wait(applied, "the CDC files applied", timeout=600)
            story.say("try-aws: the CDC files applied\n")
            story.say(
                executions_text(
                    [
                        (e["name"], e["status"], deployed.states_entered(e["executionArn"]))
                        for e in deployed.executions()
                    ]
                )
            )
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.getOrCreate()
            name = f"silver.{outputs['GlueDatabaseName']}.hosts_silver"
            rows = [r.asDict() for r in spark.table(name).drop(SILVER_ORDER).orderBy("id").collect()]
            story.say(silver_text(name, rows))
            problems = differences(rows, expected_silver(final_source_rows()))
            alerts = [a["Message"] for a in deployed.alerts()]
            deployed.stop_all()
            text, code = verdict(problems, alerts)
            story.say(text.rstrip("\n"))
            return code


if __name__ == "__main__":
    sys.exit(main())

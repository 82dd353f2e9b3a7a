"""The stack as CloudFormation creates it, driven from S3 uploads of DMS files, end to end.

`sam build`, `sam package`, the SAM transform and `create-stack` in a moto server on loopback
(tests/aws/local_stack.py); the project's preflight and upload steps (scripts/stack_artifacts.py); then DMS
files put into the bronze bucket go through the EventBridge rule's real pattern to the FIFO queue, the state
machine definition as CloudFormation rendered it, the Lambda handlers with the environment CloudFormation gave
them, and the Glue entry points the upload step put in S3 (glue/jobs/*.py), run on local Spark with the
uploaded configuration. Silver is compared with a plain-Python replay of the change log (tests/oracle.py).

Workarounds: moto's gaps are the `patch_moto_gaps` fixture (conftest.py, with the task calls answered by
task_calls.py) plus `complete_what_moto_skips`
(local_stack.py). One is ours: local Spark cannot write to S3 (no hadoop-aws), so the jobs' `--warehouse`
is a local directory; everything else they are given is what CloudFormation gave them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import iam_harness
import pytest
from conftest import MotoStepFunctionsGaps, a_started_replication_task, patch_moto_gaps
from iam_harness import CallRecorder, acting_as, least_privilege_report, stack_policies, unused_grants
from local_stack import (
    FAKE_CREDENTIALS,
    REGION,
    SAM,
    SAM_PYTHON,
    LocalStack,
    build_and_transform,
    create_stack,
    moto_server,
)
from task_calls import environment_set
from test_deploy import stack_artifacts

from cdclake.dms.writer import SourceChange, cdc_file_name, cdc_records, csv_text
from file_modules import module_at
from oracle import replay_change_log

pytestmark = [pytest.mark.spark, pytest.mark.stack]

ROOT = Path(__file__).resolve().parents[2]
STACK = "cdclake-dev"
CONFIG = """\
bronze: {format: csv, csv_header: false, timestamp_column: ts}
silver: {database: people_db}
tables:
  s.people: {primary_key: [id], columns: {id: int, name: string, city: string}}
  s.places: {primary_key: [id], columns: {id: int, name: string}}
""" + "".join(f"  s.t{n:02d}: {{primary_key: [id], columns: {{id: int, v: string}}}}\n" for n in range(1, 31))
COLUMNS = ["id", "name", "city"]
INITIAL = [{"id": str(i), "name": f"person {i}", "city": "Oslo"} for i in range(1, 7)]
LOADED_AT = "2024-03-01 11:00:00.000000"
CHANGE_LOG: list[SourceChange] = []  # every change written to bronze by the tests of this module, in order


@dataclass
class Deployed:
    """The deployed stack and the clients the tests drive it with."""

    stack: LocalStack
    gaps: MotoStepFunctionsGaps
    warehouse: Path
    alerts_url: str
    s3: Any
    sqs: Any
    sfn: Any
    broken_jobs: set[str]  # Glue jobs whose next runs fail before applying anything (a broken script, a bad role)
    root: Path  # what the deploy uploads from: glue/jobs and dist/ with the built wheel
    runs: list[tuple[str, Any]]  # each Glue job run in order: its job name and what its main() returned or raised
    calls: CallRecorder | None = None  # every stack principal's AWS calls, checked against its policies

    @property
    def bronze(self) -> str:
        return self.stack.outputs["BronzeBucketName"]

    def put_cdc_file(self, changes: list[SourceChange]) -> str:
        """Write one CDC file the way DMS does: into the bronze bucket, named by its write time."""
        CHANGE_LOG.extend(changes)
        key = f"dms/s/people/{cdc_file_name(changes[-1].commit_ts)}"
        body = csv_text(cdc_records(changes, COLUMNS, with_timestamp=True, with_seq=False))
        self.s3.put_object(Bucket=self.bronze, Key=key, Body=body.encode())
        return key

    def queue_counts(self) -> tuple[int, int]:
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.stack.outputs["FileQueueUrl"], AttributeNames=["All"])
        counts = attributes["Attributes"]
        return int(counts["ApproximateNumberOfMessages"]), int(counts["ApproximateNumberOfMessagesNotVisible"])

    def executions(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = self.sfn.list_executions(stateMachineArn=self.stack.outputs["StateMachineArn"])[
            "executions"
        ]
        for execution in listed:  # moto leaves out the name
            execution.setdefault("name", execution["executionArn"].rsplit(":", 1)[-1])
        return sorted(listed, key=lambda e: e["startDate"])

    def states_entered(self, arn: str) -> list[str]:
        events = self.sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
        return [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]

    def wait(self, condition: Any, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                paths = {e["name"]: self.states_entered(e["executionArn"])[-12:] for e in self.executions()}
                raise AssertionError(f"{what}: not after {timeout}s; executions: {paths}")
            time.sleep(0.2)

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts received since the last call (read and deleted)."""
        got = self.sqs.receive_message(QueueUrl=self.alerts_url, MaxNumberOfMessages=10).get("Messages", [])
        for message in got:
            self.sqs.delete_message(QueueUrl=self.alerts_url, ReceiptHandle=message["ReceiptHandle"])
        return [json.loads(m["Body"]) for m in got]

    def silver(self) -> dict[tuple[str, ...], dict[str, str | None]]:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()  # the session the job runs built (they ran in other threads)
        rows = spark.table(f"silver.{self.stack.outputs['GlueDatabaseName']}.people").collect()
        return {(str(r["id"]),): {"id": str(r["id"]), "name": r["name"], "city": r["city"]} for r in rows}

    def stop_all(self) -> None:
        for _ in range(50):
            running = [e for e in self.executions() if e["status"] == "RUNNING"]
            if not running:
                return
            for execution in running:
                with contextlib.suppress(Exception):  # moto: stopping a finishing execution raises inside moto
                    self.sfn.stop_execution(executionArn=execution["executionArn"])
            time.sleep(0.2)


class Killed(BaseException):
    """The Glue worker was lost mid-run: not an error any code of the job catches."""


def run_glue_entry_point(
    s3: Any,
    work: Path,
    warehouse: Path,
    broken: set[str],
    runs: list[tuple[str, Any]],
    calls: CallRecorder | None = None,
) -> Any:
    """What a Glue job run does with its script: fetch it from the job's ScriptLocation and run its main().
    With ``calls``, the run acts as the job's role (Glue reads the script with it, and so does the job's code)."""
    glue = boto3.client("glue", region_name=REGION)

    def run(job_name: str, arguments: dict[str, str]) -> None:
        if job_name in broken:
            broken_run = RuntimeError(f"simulated failure of {job_name}")
            runs.append((job_name, broken_run))
            raise broken_run
        job = glue.get_job(JobName=job_name)["Job"]
        role = None if calls is None or calls.policies is None else calls.policies.role_of_arn(job["Role"])
        with acting_as(role):
            run_as_the_job(job_name, job["Command"]["ScriptLocation"], arguments)

    def run_as_the_job(job_name: str, location: str, arguments: dict[str, str]) -> None:
        bucket, _, key = location[len("s3://") :].partition("/")
        script = work / "scripts" / key
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        module = module_at(script, f"glue_script_{script.stem}")
        # Ours, not moto's: local Spark cannot write to S3 (no hadoop-aws), so the warehouse is local.
        given = {**arguments, "--warehouse": str(warehouse)}
        try:
            runs.append((job_name, module.main([str(script), *(item for pair in given.items() for item in pair)])))
        except Killed as killed:  # the run ends FAILED, as Glue reports a lost worker
            runs.append((job_name, killed))
            raise RuntimeError(f"{job_name}: {killed}") from None
        except Exception as error:
            runs.append((job_name, error))
            raise

    return run


def wheel_into(root: Path) -> Path:
    """The project's wheel, built as `make deploy-wheel` builds it (the upload step puts it where the jobs read)."""
    run = subprocess.run(
        [str(SAM_PYTHON), "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps", "--wheel-dir",
         str(root / "dist"), str(ROOT)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (root / "glue").mkdir(exist_ok=True)
    (root / "glue" / "jobs").symlink_to(ROOT / "glue" / "jobs")
    return root


@contextlib.contextmanager
def local_aws() -> Iterator[tuple[str, MotoStepFunctionsGaps, CallRecorder]]:
    """The AWS a stack is deployed into here: fake credentials, moto's gaps patched, a moto server (its
    endpoint and the gaps' record), and the IAM harness recording every call (iam_harness.py: the principals
    are set by ``deploy``); skipped without the SAM CLI."""
    if not SAM.exists():
        pytest.skip(f"{SAM} is missing: run `make aws-tools`")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            patch.delenv(name, raising=False)
        for name, value in {**FAKE_CREDENTIALS, "POWERTOOLS_TRACE_DISABLED": "true"}.items():
            patch.setenv(name, value)
        gaps = patch_moto_gaps(patch)
        calls = iam_harness.install(patch)  # after the gaps: its hooks run before task_calls.py's
        with moto_server() as endpoint:
            patch.setenv("AWS_ENDPOINT_URL", endpoint)
            yield endpoint, gaps, calls


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    with local_aws() as (endpoint, gaps, calls):
        yield deploy(tmp_path_factory.mktemp("deployed"), endpoint, gaps, calls=calls)


@pytest.fixture(autouse=True)
def every_call_allowed(deployed: Deployed) -> Iterator[None]:
    """After each test: no principal of the stack made a call its policies do not allow (iam_harness.py). Such a
    call was answered AccessDenied, as AWS would; this names principal, action and ARN even where the code
    under test swallowed the refusal."""
    assert deployed.calls is not None
    before = len(deployed.calls.denied)
    yield
    assert deployed.calls.denied[before:] == []


def deploy(
    work: Path,
    endpoint: str,
    gaps: MotoStepFunctionsGaps,
    config_text: str = CONFIG,
    parameters: dict[str, str] | None = None,
    calls: CallRecorder | None = None,
) -> Deployed:
    """The deploy as `make deploy` does it, into the emulator: preflight, stack, upload; then the test's wiring.
    ``parameters``: stack parameters beside (or over) the ones every deployed test uses. ``calls``: the IAM
    harness, given the created stack's policies, the state machine's role and each handler's and job's role."""
    s3, sqs, sns, dms = (boto3.client(s, region_name=REGION) for s in ("s3", "sqs", "sns", "dms"))
    task = a_started_replication_task(dms)
    template = build_and_transform(work, endpoint)
    root = wheel_into(work / "root")
    config = work / "cdclake.yaml"
    config.write_text(config_text, encoding="utf-8")
    given = {"EnvironmentName": "dev", "ReplicationTaskArns": task, "AlertEmail": "ops@example.com",
             "PollSeconds": "1", "CdcPollSeconds": "1", "CdcIdleSeconds": "2", "SweepEveryIterations": "4",
             "MaintenanceEveryHours": "0"} | (parameters or {})  # fmt: skip
    # The deploy's own preflight: the wheel's key, and no retained database to adopt on a first deploy.
    overrides = stack_artifacts.preflight(
        boto3.client("cloudformation", region_name=REGION), boto3.client("glue", region_name=REGION), s3,
        STACK, [f"{k}={v}" for k, v in given.items()], root, config,
    )  # fmt: skip
    given |= dict(o.split("=", 1) for o in overrides)
    stack = create_stack(template, STACK, given, endpoint)
    stack_artifacts.upload(s3, stack.outputs, root, config)  # the deployer's, not a stack principal's
    if calls is not None:
        calls.policies = stack_policies(stack)
        described = boto3.client("stepfunctions", region_name=REGION).describe_state_machine(
            stateMachineArn=stack.outputs["StateMachineArn"]
        )
        calls.state_machine_role = calls.policies.role_of_arn(described["roleArn"])
    # Alerts: an SQS inbox subscribed to the stack's topic (its e-mail subscription reaches nobody here).
    alerts_url = sqs.create_queue(QueueName="alerts-inbox")["QueueUrl"]
    alerts_arn = sqs.get_queue_attributes(QueueUrl=alerts_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    topic = stack.physical("AlertTopic")
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=alerts_arn)
    # The handlers the functions' Handler names (app.handler in their CodeUri), run in-process (GAP 5) and
    # imported as Lambda imports them: with the function's environment already set (Powertools reads it then).
    lam = boto3.client("lambda", region_name=REGION)
    for logical, function in (("WorkCheckFunction", "work_check"),):
        name = stack.physical(logical)
        configuration = lam.get_function_configuration(FunctionName=name)
        environment = {k: str(v) for k, v in configuration["Environment"]["Variables"].items()}
        handler = handler_imported_with(function, environment)
        if calls is not None and calls.policies is not None:
            handler = acting_as_role(handler, calls.policies.role_of_arn(configuration["Role"]))
        gaps.lambda_handlers[name] = handler
    warehouse = work / "lake" / "warehouse"
    broken: set[str] = set()
    runs: list[tuple[str, Any]] = []
    gaps.glue_runner = run_glue_entry_point(s3, work, warehouse, broken, runs, calls)
    gaps.glue_runner_in_background = True
    gaps.retry_waits = []  # the state machine's Retry pauses (60 s and more) are recorded, not slept
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return Deployed(stack, gaps, warehouse, alerts_url, s3, sqs, sfn, broken, root, runs, calls)


def acting_as_role(handler: Any, role: str) -> Any:
    """The Lambda handler, its calls made as the function's role."""

    def handle(event: Any, context: Any) -> Any:
        with acting_as(role):
            return handler(event, context)

    return handle


def handler_imported_with(function: str, environment: dict[str, str]) -> Any:
    """functions/<function>/app.py imported afresh while ``environment`` is set, as in a Lambda cold start."""
    with environment_set(environment):
        module = module_at(ROOT / "functions" / function / "app.py", f"deployed_{function}_app")
    return module.handler


def change(op: str, ident: int, name: str, city: str, second: int) -> SourceChange:
    ts = f"2024-03-01 12:{second // 60:02d}:{second % 60:02d}.000000"
    return SourceChange(op, {"id": str(ident), "name": name, "city": city}, ts, "")


def test_dms_files_put_in_bronze_reach_silver_through_the_deployed_pipeline(deployed: Deployed) -> None:
    # GIVEN the full load in bronze (DMS's LOAD file: no Op column) and the stack's pipeline started
    load = csv_text([[LOADED_AT, r["id"], r["name"], r["city"]] for r in INITIAL])
    deployed.s3.put_object(Bucket=deployed.bronze, Key="dms/s/people/LOAD00000001.csv", Body=load.encode())
    first = deployed.sfn.start_execution(
        stateMachineArn=deployed.stack.outputs["StateMachineArn"], name="first", input="{}"
    )
    # WHEN DMS writes three CDC files (updates, deletes, inserts, a key changed twice across files)
    batches = [
        [change("U", 1, "person 1", "Bergen", 1), change("D", 2, "person 2", "Oslo", 2)],
        [change("I", 7, "person 7", "Tromsø", 3), change("U", 1, "person one", "Bergen", 4)],
        [change("D", 7, "person 7", "Tromsø", 5), change("U", 3, "person 3", "Oslo, Norway", 6)],
    ]
    # (the first Glue run starts Spark and loads 32 tables: on a busy 2-core machine it has taken over 6 minutes)
    deployed.wait(lambda: len(deployed.executions()) == 2, "the full-load execution hands over", timeout=600)
    for batch in batches:
        deployed.put_cdc_file(batch)
    # THEN the queue drains, every file is applied, and silver equals the replayed change log
    cdc_job = deployed.stack.outputs["CdcJobName"]
    glue = boto3.client("glue", region_name=REGION)

    def applied() -> bool:
        runs = glue.get_job_runs(JobName=cdc_job)["JobRuns"]
        return deployed.queue_counts() == (0, 0) and runs != [] and all(r["JobRunState"] == "SUCCEEDED" for r in runs)

    deployed.wait(applied, "the CDC files applied and acknowledged")
    expected = replay_change_log(INITIAL, CHANGE_LOG, ["id"])
    assert deployed.silver() == expected
    # AND the executions handed over as designed: the first ran the full load, its successor (named after it)
    # consumes the queue
    [full_load, successor] = deployed.executions()
    assert full_load["executionArn"] == first["executionArn"] and full_load["status"] == "SUCCEEDED"
    assert deployed.states_entered(first["executionArn"])[-3:] == ["MarkFullLoadDone", "StartSuccessor", "HandedOver"]
    assert successor["name"].startswith("g1-") and successor["status"] == "RUNNING"
    path = deployed.states_entered(successor["executionArn"])
    assert path.count("RunCdcJob") >= 1 and path.count("CdcRunDone") >= path.count("RunCdcJob") - 1  # one may run
    assert deployed.alerts() == []
    # AND the work check's first look for a reload request, before any CDC run had written one, was allowed: it
    # listed the one key (S3 answers a read of a missing key with 403 to a caller that may not list the bucket)
    assert deployed.calls is not None and deployed.calls.policies is not None
    first_look = first_reload_request_look(deployed.calls)
    assert (first_look.operation, first_look.params["Prefix"], first_look.denied) == (
        "ListObjectsV2", "state/reloads.json", []
    )  # fmt: skip
    # AND under the policy before ListReloadRequest that very call is refused: the first iteration failed there
    old_policy = deployed.calls.policies.without("WorkCheckFunctionRole", "ListReloadRequest")
    again = iam_harness.ApiCall(first_look.principal, "s3", first_look.operation, first_look.params)
    old_policy.check(again, lambda _: None)
    assert [(r.action, why) for r, why in again.denied] == [("s3:ListBucket", "implicit deny")]
    print_summary(deployed)


def first_reload_request_look(calls: CallRecorder) -> iam_harness.ApiCall:
    """The work check's first call about the reload request, which must precede the CDC job's first write of it."""
    reload_calls = [
        (n, c) for n, c in enumerate(calls.calls) if "state/reloads.json" in json.dumps(c.params, default=str)
    ]
    [(first_read, look), *_] = [(n, c) for n, c in reload_calls if c.principal == "WorkCheckFunctionRole"]
    writes = [n for n, c in reload_calls if c.operation == "PutObject" and c.principal == "CdcJobRole"]
    assert writes == [] or first_read < writes[0], "the first iteration's CheckWork found a request already written"
    return look


def place(op: str, ident: int, name: str, second: int) -> SourceChange:
    return SourceChange(op, {"id": str(ident), "name": name}, f"2024-03-01 13:00:{second:02d}.000000", "")


def test_a_table_whose_load_arrives_after_the_first_cdc_run_is_reloaded_through_the_reload_lane(
    deployed: Deployed,
) -> None:
    # GIVEN the CDC loop running (the first test), and DMS's full load of a second table written only now, with a
    # CDC file of that table after it (the file's event wakes the CDC job)
    places = [{"id": "1", "name": "Oslo"}, {"id": "2", "name": "Bergen"}]
    load = csv_text([[LOADED_AT, p["id"], p["name"]] for p in places])
    deployed.s3.put_object(Bucket=deployed.bronze, Key="dms/s/places/LOAD00000001.csv", Body=load.encode())
    changes = [place("U", 2, "Bergen, Norway", 1), place("I", 3, "Tromsø", 2)]
    body = csv_text(cdc_records(changes, ["id", "name"], with_timestamp=True, with_seq=False))
    deployed.s3.put_object(
        Bucket=deployed.bronze, Key=f"dms/s/places/{cdc_file_name(changes[-1].commit_ts)}", Body=body.encode()
    )
    # WHEN the CDC job finds the table not loaded: it writes the reload request and holds the table's CDC; the
    # work check reads the request and the state machine starts the full-load job for that table
    full_load = deployed.stack.outputs["FullLoadJobName"]

    def reloaded() -> bool:
        return any(job == full_load and not isinstance(outcome, Exception) for job, outcome in deployed.runs[1:])

    deployed.wait(reloaded, "the full-load job run for the requested table", timeout=300)
    glue = boto3.client("glue", region_name=REGION)
    [reload_run] = [r for r in glue.get_job_runs(JobName=full_load)["JobRuns"] if r["Arguments"].get("--tables")]
    assert reload_run["Arguments"]["--tables"] == "s.places"
    # THEN once loaded, its held CDC file is applied after the load
    expected = replay_change_log(places, changes, ["id"])
    deployed.wait(lambda: silver_places(deployed) == expected, "s.places loaded and its CDC applied", timeout=300)
    # AND every call of the work check, the CDC job, the full-load job and the state machine was allowed
    assert deployed.calls is not None
    assert {c.principal for c in deployed.calls.calls} >= {
        "WorkCheckFunctionRole", "CdcJobRole", "FullLoadJobRole", "PipelineStateMachineRole"
    }  # fmt: skip
    assert deployed.calls.denied == []


def silver_places(deployed: Deployed) -> dict[tuple[str, ...], dict[str, str | None]]:
    from pyspark.errors import AnalysisException
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    try:
        rows = spark.table(f"silver.{deployed.stack.outputs['GlueDatabaseName']}.places").collect()
    except AnalysisException:  # not created yet
        return {}
    return {(str(r["id"]),): {"id": str(r["id"]), "name": r["name"]} for r in rows}


def test_a_failing_cdc_run_is_retried_then_alerts_and_the_loop_goes_on(deployed: Deployed) -> None:
    # GIVEN the pipeline running and a CDC job whose runs fail
    cdc_job = deployed.stack.outputs["CdcJobName"]
    execution = running_execution(deployed)
    deployed.broken_jobs.add(cdc_job)
    assert deployed.gaps.retry_waits is not None
    waits_before = len(deployed.gaps.retry_waits)
    failed_before = sum(1 for job, outcome in deployed.runs if job == cdc_job and isinstance(outcome, Exception))
    # WHEN DMS writes a file
    deployed.put_cdc_file([change("U", 4, "person 4", "Narvik", 10)])
    # THEN the run is tried four times (three retries after growing pauses), then the alert says so
    alerts: list[dict[str, Any]] = []
    deployed.wait(lambda: alerts.extend(deployed.alerts()) or bool(alerts), "the alert")
    assert alerts[0]["Subject"] == "cdclake: a CDC run failed"
    assert "simulated failure of cdclake-dev-cdc" in alerts[0]["Message"]
    assert deployed.gaps.retry_waits[waits_before : waits_before + 3] == [60, 120, 240]
    assert sum(1 for job, outcome in deployed.runs if job == cdc_job and isinstance(outcome, Exception)) >= (
        failed_before + 4
    )
    # AND the loop goes on: the execution still runs, and once the job is repaired the file is applied
    assert deployed.sfn.describe_execution(executionArn=execution)["status"] == "RUNNING"
    deployed.broken_jobs.clear()
    deployed.wait(lambda: deployed.queue_counts() == (0, 0), "the file applied and its event deleted")
    deployed.wait(lambda: deployed.silver() == replay_change_log(INITIAL, CHANGE_LOG, ["id"]), "silver converged")
    assert deployed.sfn.describe_execution(executionArn=execution)["status"] == "RUNNING"
    time.sleep(2)
    while deployed.alerts():  # sweep runs that failed while the job was broken alerted too
        pass


def test_a_file_whose_event_never_came_is_applied_by_a_sweep_run(deployed: Deployed) -> None:
    # GIVEN a file DMS wrote whose S3 event never reached the queue (dropped here from the queue, with the
    # pipeline stopped: moto delivers events even for a disabled rule)
    stop_the_pipeline(deployed)
    deployed.put_cdc_file([change("U", 5, "person 5", "Bodø", 20), change("I", 8, "person 8", "Alta", 21)])
    deployed.wait(lambda: deployed.queue_counts() == (1, 0), "the event queued")
    queue = deployed.stack.outputs["FileQueueUrl"]
    [event] = deployed.sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    deployed.sqs.delete_message(QueueUrl=queue, ReceiptHandle=event["ReceiptHandle"])
    # WHEN the pipeline runs with an empty queue
    execution = restart(deployed, "lost-event")
    # THEN a sweep run (after SweepEveryIterations idle iterations) lists bronze and applies the file
    deployed.wait(lambda: deployed.silver() == replay_change_log(INITIAL, CHANGE_LOG, ["id"]), "the file applied")
    path = deployed.states_entered(execution)
    assert path.count("WaitForFiles") >= 3 and "RunCdcSweep" in path
    assert deployed.queue_counts() == (0, 0) and deployed.alerts() == []
    # AND the sweep run was started without an idle wait: it listed bronze once and ended
    glue = boto3.client("glue", region_name=REGION)
    sweeps = [r for r in glue.get_job_runs(JobName=deployed.stack.outputs["CdcJobName"])["JobRuns"]
              if r["Arguments"].get("--idle_seconds") == "0"]  # fmt: skip
    assert sweeps and all(r["Arguments"]["--relist_seconds"] == "900" for r in sweeps)


BACKLOG_TABLES = [f"t{n:02d}" for n in range(1, 31)]
TABLE_LOG: dict[str, list[SourceChange]] = {}  # every change written to the 30 tables' folders, per table


def table_file(deployed: Deployed, table: str, changes: list[SourceChange]) -> None:
    TABLE_LOG.setdefault(table, []).extend(changes)
    body = csv_text(cdc_records(changes, ["id", "v"], with_timestamp=True, with_seq=False))
    key = f"dms/s/{table}/{cdc_file_name(changes[-1].commit_ts)}"
    deployed.s3.put_object(Bucket=deployed.bronze, Key=key, Body=body.encode())


def table_change(op: str, ident: int, value: str, second: int) -> SourceChange:
    ts = f"2024-03-02 10:{second // 60:02d}:{second % 60:02d}.000000"
    return SourceChange(op, {"id": str(ident), "v": value}, ts, "")


def silver_table(deployed: Deployed, table: str) -> dict[tuple[str, ...], dict[str, str | None]]:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    rows = spark.table(f"silver.{deployed.stack.outputs['GlueDatabaseName']}.{table}").collect()
    return {(str(r["id"]),): {"id": str(r["id"]), "v": r["v"]} for r in rows}


def applied_per_file(deployed: Deployed, table: str) -> dict[str, int]:
    """How many commits of the table's snapshot history record each bronze key (Iceberg's snapshots table)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    snapshots = spark.sql(
        f"SELECT summary['cdclake.files'] AS files FROM silver.{deployed.stack.outputs['GlueDatabaseName']}.{table}"
        ".snapshots WHERE summary['cdclake.kind'] = 'cdc'"
    ).collect()
    counts: dict[str, int] = {}
    for row in snapshots:
        for key in json.loads(row["files"]):
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_a_backlog_of_30_tables_is_applied_by_one_cdc_run_and_every_event_deleted(deployed: Deployed) -> None:
    # GIVEN the pipeline stopped while DMS wrote two files for each of 30 tables (60 events queued)
    stop_the_pipeline(deployed)
    for number, table in enumerate(BACKLOG_TABLES):
        table_file(deployed, table, [table_change("I", 1, "a", number), table_change("I", 2, "b", number)])
        table_file(deployed, table, [table_change("U", 1, "a2", 60 + number), table_change("D", 2, "", 60 + number)])
    deployed.wait(lambda: deployed.queue_counts() == (60, 0), "60 events queued")
    before = len(deployed.runs)
    # WHEN the pipeline starts again
    restart(deployed, "backlog")
    # THEN ONE CDC run applies all 60 files (it lists bronze; the queue only woke it) and deletes every event
    deployed.wait(lambda: deployed.queue_counts() == (0, 0), "every event deleted", timeout=300)
    cdc_job = deployed.stack.outputs["CdcJobName"]
    deployed.wait(lambda: any(job == cdc_job for job, _ in deployed.runs[before:]), "the run ended (idle)")
    cdc_runs = [o for job, o in deployed.runs[before:] if job == cdc_job]
    assert cdc_runs and cdc_runs[0].files_applied == 60 and cdc_runs[0].failures == {}
    for table in BACKLOG_TABLES:
        assert silver_table(deployed, table) == replay_change_log([], TABLE_LOG[table], ["id"]), table


def test_a_cdc_run_that_dies_mid_round_is_finished_by_the_next_with_nothing_lost_or_applied_twice(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cdclake.lake.committer import IcebergCommitter

    # GIVEN the pipeline stopped while DMS wrote a file for each of 30 tables, and a Glue worker that is lost
    # after the run's 10th data commit
    stop_the_pipeline(deployed)
    for number, table in enumerate(BACKLOG_TABLES):
        table_file(deployed, table, [table_change("U", 1, f"c{number}", 200 + number)])
    commits = {"count": 0, "died": 0}
    for method in ("merge", "publish", "row_delta", "driver_row_delta"):
        real = getattr(IcebergCommitter, method)

        def dies_after_ten(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if commits["count"] >= 10 and not commits["died"]:
                commits["died"] = 1
                raise Killed("the Glue worker was lost")
            made = _real(self, *args, **kwargs)
            commits["count"] += 1
            return made

        monkeypatch.setattr(IcebergCommitter, method, dies_after_ten)
    before = {t: applied_per_file(deployed, t) for t in BACKLOG_TABLES}
    # WHEN the pipeline starts: its first run dies after 10 commits; the state machine tries again
    restart(deployed, "dies")
    deployed.wait(lambda: deployed.queue_counts() == (0, 0), "every event deleted", timeout=300)
    assert commits["died"] and 10 <= commits["count"] < 10 + len(BACKLOG_TABLES)  # the next run did the rest
    # THEN every table equals the replay, and every file was recorded by exactly one commit
    for table in BACKLOG_TABLES:
        assert silver_table(deployed, table) == replay_change_log([], TABLE_LOG[table], ["id"]), table
        counts = applied_per_file(deployed, table)
        assert all(n == 1 for n in counts.values()) and len(counts) == len(before[table]) + 1, table
    assert deployed.alerts() == []


def dms_task_event(task: str, event_type: str) -> dict[str, str]:
    """A DMS task state change on the default event bus, as DMS sends it (DMS user guide, EventBridge example)."""
    detail = {"type": "REPLICATION_TASK", "category": "StateChange", "eventType": event_type,
              "detailMessage": "Stopped Replication Task"}  # fmt: skip
    return {"Source": "aws.dms", "DetailType": "DMS Replication Task State Change", "Resources": [task],
            "Detail": json.dumps(detail)}  # fmt: skip


def test_a_stopped_dms_task_reaches_the_alert_topic_through_the_deployed_rule(deployed: Deployed) -> None:
    # GIVEN the deployed stack, its alert topic subscribed to by an SQS inbox, and nothing alerted yet
    while deployed.alerts():
        pass
    task = deployed.stack.resolver.parameters["ReplicationTaskArns"]
    other = task.rsplit(":", 1)[0] + ":ANOTHERSTACKSTASK"
    events = boto3.client("events", region_name=REGION)
    # WHEN DMS reports, on the default bus, another stack's task stopping, this stack's task starting, then stopping
    answer = events.put_events(Entries=[dms_task_event(other, "REPLICATION_TASK_STOPPED"),
                                        dms_task_event(task, "REPLICATION_TASK_STARTED"),
                                        dms_task_event(task, "REPLICATION_TASK_STOPPED")])  # fmt: skip
    assert answer["FailedEntryCount"] == 0
    # THEN exactly one alert arrives through the rule CloudFormation created: this task's stop
    alerts: list[dict[str, Any]] = []
    deployed.wait(lambda: alerts.extend(deployed.alerts()) or bool(alerts), "the DMS task alert", timeout=30)
    time.sleep(1)
    alerts.extend(deployed.alerts())
    [alert] = [json.loads(a["Message"]) for a in alerts]
    assert (alert["source"], alert["resources"], alert["detail"]["eventType"]) == (
        "aws.dms", [task], "REPLICATION_TASK_STOPPED",
    )  # fmt: skip
    rule = deployed.stack.physical("ReplicationTaskStoppedRule").rsplit("|", 1)[-1]
    [target] = events.list_targets_by_rule(Rule=rule)["Targets"]
    assert target["Arn"] == deployed.stack.physical("AlertTopic")


def test_the_first_maintenance_run_makes_only_calls_its_role_allows(deployed: Deployed) -> None:
    # GIVEN the pipeline stopped (maintenance rewrites the tables the CDC job commits to). Last of the CDC tests:
    # maintenance prunes tombstones older than TombstoneRetentionDays, and the test files' changes are of 2024, so
    # later CDC files of theirs would be held as older than the tombstone horizon (as they should)
    stop_the_pipeline(deployed)
    maintenance = deployed.stack.outputs["MaintenanceJobName"]
    before = len(deployed.runs)
    # WHEN the maintenance job runs, as the state machine starts it every MaintenanceEveryHours
    boto3.client("glue", region_name=REGION).start_job_run(JobName=maintenance)
    deployed.wait(lambda: any(job == maintenance for job, _ in deployed.runs[before:]), "the maintenance run ended",
                  timeout=300)  # fmt: skip
    # THEN it succeeded, as its role, with every call allowed
    [outcome] = [o for job, o in deployed.runs[before:] if job == maintenance]
    assert not isinstance(outcome, Exception), outcome
    assert deployed.calls is not None and deployed.calls.calls_of("MaintenanceJobRole") != []


def print_summary(deployed: Deployed) -> None:
    for execution in deployed.executions():
        path = deployed.states_entered(execution["executionArn"])
        print(f"{execution['name']}: {execution['status']}: {' > '.join(path[:40])}{' ...' if len(path) > 40 else ''}")
    for key, row in sorted(deployed.silver().items(), key=lambda kv: int(kv[0][0])):
        print(key[0], row["name"], row["city"])


def running_execution(deployed: Deployed) -> str:
    [running] = [e["executionArn"] for e in deployed.executions() if e["status"] == "RUNNING"]
    return running


def stop_the_pipeline(deployed: Deployed) -> None:
    """Stop the executions, then wait for a CDC run under way (it follows the queue until idle) to end."""
    deployed.stop_all()
    cdc_job = deployed.stack.outputs["CdcJobName"]

    def no_run_under_way() -> bool:
        started = sum(1 for event, job, _ in deployed.gaps.glue_timeline if event == "start" and job == cdc_job)
        return started == sum(1 for job, _ in deployed.runs if job == cdc_job)

    deployed.wait(no_run_under_way, "the CDC run under way ended")


def restart(deployed: Deployed, name: str) -> str:
    """Start the pipeline again (the CDC loop)."""
    arn: str = deployed.sfn.start_execution(
        stateMachineArn=deployed.stack.outputs["StateMachineArn"], name=name, input='{"fullLoadDone": true}'
    )["executionArn"]
    return arn


def test_a_redeploy_after_destroy_uses_the_retained_databases(deployed: Deployed, tmp_path: Path) -> None:
    # GIVEN the stack destroyed as `make destroy` does: executions stopped, stack deleted (databases kept)
    cfn = boto3.client("cloudformation", region_name=REGION)
    glue = boto3.client("glue", region_name=REGION)
    stack_artifacts.stop_executions(deployed.sfn, deployed.stack.outputs["StateMachineArn"])
    deployed.stop_all()
    cfn.delete_stack(StackName=STACK)
    deployed.wait(lambda: STACK not in {s["StackName"] for s in cfn.describe_stacks()["Stacks"]}, "the stack deleted")
    assert {d["Name"] for d in glue.get_databases()["DatabaseList"]} >= {"cdclake_dev", "cdclake_dev_gold"}
    template = json.loads(json.dumps(deployed.stack.resolver.template))
    given = {k: v for k, v in deployed.stack.resolver.parameters.items() if k in template["Parameters"]}
    # WHEN it is created again as before THEN the databases cannot be created again (what CloudFormation answers)
    with pytest.raises(glue.exceptions.AlreadyExistsException):
        create_stack(template, "cdclake-dev-again", given, os.environ["AWS_ENDPOINT_URL"])
    cfn.delete_stack(StackName="cdclake-dev-again")
    # WHEN the deploy's preflight is asked first THEN the new stack uses the retained databases and is created
    config = tmp_path / "cdclake.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    overrides = stack_artifacts.preflight(
        cfn, glue, deployed.s3, "cdclake-dev-redeploy", [f"{k}={v}" for k, v in given.items()], deployed.root, config
    )
    assert {"ExistingSilverDatabase=true", "ExistingGoldDatabase=true"} <= set(overrides)
    redeployed = given | dict(o.split("=", 1) for o in overrides)
    again = create_stack(template, "cdclake-dev-redeploy", redeployed, os.environ["AWS_ENDPOINT_URL"])
    assert again.outputs["GlueDatabaseName"] == "cdclake_dev"
    assert "GlueDatabase" not in again.resolver.physical and "GoldDatabase" not in again.resolver.physical


def test_the_least_privilege_report_in_docs_is_what_the_harness_produces(
    deployed: Deployed, request: pytest.FixtureRequest
) -> None:
    """docs/iam.md's section for this stack: every grant of every role, used by a recorded call of this module's
    tests or named as used outside them (the Java side on Glue, the services' own calls). Last in the module."""
    assert deployed.calls is not None and deployed.calls.policies is not None
    report = least_privilege_report(deployed.calls.policies, deployed.calls.used, REPORT_TITLE)
    iam_harness.dump(deployed.calls, "deployed-stack")
    check_report_section("deployed-stack", report, request)
    assert unused_grants(report) == []  # a grant nothing uses is trimmed from template.yaml, or named where used


REPORT_TITLE = "The stack of tests/aws/test_deployed_stack.py (no source secret)"


def check_report_section(section: str, report: str, request: pytest.FixtureRequest) -> None:
    """The committed section equals the harness's report; it is written instead with CDCLAKE_WRITE_IAM_REPORT=1.
    Only a run of the whole module has made every call the report counts: a selection skips the comparison."""
    module = request.module
    selected = [item for item in request.session.items if getattr(item, "module", None) is module]
    defined = [name for name in dir(module) if name.startswith("test_") and callable(getattr(module, name))]
    if os.environ.get(iam_harness.WRITE_REPORT) == "1":
        iam_harness.write_section(section, report)
        return
    if not iam_harness.REPORT.exists():  # a checkout without the docs
        pytest.skip("docs/iam.md is missing")
    if len(selected) < len(defined):
        pytest.skip("the report is compared after a run of the whole module (a selection makes fewer calls)")
    committed = iam_harness.committed_section(section)
    assert committed is not None, f"docs/iam.md has no section {section}: write it with {iam_harness.WRITE_REPORT}=1"
    # The grants, row for row; a verdict may differ between "yes" and the named user (a run whose CDC job alerted
    # a table's failure used PublishAlerts, one that did not names it): both are accounted for.
    assert iam_harness.grant_rows(committed) == iam_harness.grant_rows(report)

"""Fixtures for the AWS stack tests: fake credentials, the Lambda functions, and the moto pipeline.

Everything runs in-process against moto: no AWS account, no network, no Docker.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws
from task_calls import TaskCalls

import jvm_options  # noqa: F401  (sets the JVM options of every Spark session this process starts)
from file_modules import module_at
from s3_events import ACCOUNT, REGION, object_created_event

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"
DEFINITION = ROOT / "statemachine" / "cdc_pipeline.asl.json"


def _template_max_receive_count() -> int:
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    [count] = re.findall(r"^\s+maxReceiveCount: (\d+)", text, flags=re.MULTILINE)
    return int(count)


MAX_RECEIVE_COUNT = _template_max_receive_count()

# In Lambda, a function's code directory is on sys.path: app.py imports its logic module by its bare name.
# The logic modules have unique names (work, ...) so every function's directory can be on the path.
for _function_dir in sorted(p for p in FUNCTIONS.iterdir() if p.is_dir()):
    if str(_function_dir) not in sys.path:
        sys.path.insert(0, str(_function_dir))


def load_handler_module(function: str) -> ModuleType:
    """Import functions/<function>/app.py under a unique module name (every function has an app.py)."""
    name = f"{function}_app"
    if name in sys.modules:
        return sys.modules[name]
    return module_at(FUNCTIONS / function / "app.py", name)


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials (moto never sees real ones) and the Powertools settings template.yaml's Globals set."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "cdclake")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "cdclake")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")


@dataclass
class FakeLambdaContext:
    """The attributes Powertools' Logger reads from a Lambda context."""

    function_name: str = "cdclake-test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:cdclake-test"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 60_000


@pytest.fixture
def lambda_context() -> FakeLambdaContext:
    return FakeLambdaContext()


# ---------------------------------------------------------------------------------------- moto gaps


def a_started_replication_task(dms: Any) -> str:
    """The DMS task the stack watches (full load and CDC into bronze), created and started; its ARN."""
    task_arn: str = dms.create_replication_task(
        ReplicationTaskIdentifier="source-to-bronze",
        SourceEndpointArn=f"arn:aws:dms:{REGION}:{ACCOUNT}:endpoint:SOURCE",
        TargetEndpointArn=f"arn:aws:dms:{REGION}:{ACCOUNT}:endpoint:TARGET",
        ReplicationInstanceArn=f"arn:aws:dms:{REGION}:{ACCOUNT}:rep:INSTANCE",
        MigrationType="full-load-and-cdc",
        TableMappings=json.dumps({"rules": []}),
    )["ReplicationTask"]["ReplicationTaskArn"]
    dms.start_replication_task(ReplicationTaskArn=task_arn, StartReplicationTaskType="start-replication")
    return task_arn


@dataclass
class MotoStepFunctionsGaps(TaskCalls):
    """Knobs the gap workarounds expose to tests (moto cannot model these itself); the task calls' own
    (Lambda handlers, the hand-over's faults) are ``TaskCalls``'."""

    full_load_percent: dict[str, int] = field(default_factory=dict)  # task ARN -> FullLoadProgressPercent
    never_started: set[str] = field(default_factory=set)  # task ARNs created but never started
    failing_jobs: set[str] = field(default_factory=set)  # Glue job names whose runs end FAILED
    # Every Glue job run's start and end, in the order they happened: (event, job name, run id).
    glue_timeline: list[tuple[str, str, str]] = field(default_factory=list)
    # $$.Execution.StartTime of the executions started from now on (None: the real start time).
    execution_start_time: datetime.datetime | None = None
    # Glue job name -> seconds its runs stay RUNNING before they end (moto ends them at once).
    running_seconds: dict[str, float] = field(default_factory=dict)
    # Glue run id -> the ExecutionTime it reports (moto reports 123 s for every run).
    execution_seconds: dict[str, int] = field(default_factory=dict)
    # Glue job name -> the ExecutionTime every run of it reports (a run id in execution_seconds comes first).
    job_execution_seconds: dict[str, int] = field(default_factory=dict)
    # Runs a Glue job for real (job name, its arguments: default then run's); an exception fails the run.
    glue_runner: Callable[[str, dict[str, str]], None] | None = None
    # Run it in a thread of its own, the run RUNNING until it returns (a Glue run is asynchronous; a run
    # inside the StartJobRun request outlives the client's read timeout and is started again by its retry).
    glue_runner_in_background: bool = False
    runner_threads: dict[str, threading.Thread] = field(default_factory=dict)  # run id -> its runner
    failed_runs: dict[str, str] = field(default_factory=dict)  # run id -> error message
    # Not a gap: a list makes Retry waits instant and records each interval moto would have slept (None: sleep).
    retry_waits: list[float] | None = None


@pytest.fixture
def moto_step_functions_gaps(monkeypatch: pytest.MonkeyPatch) -> MotoStepFunctionsGaps:
    """Work around the moto 5.2.5 gaps listed in ../shared/RUNTIME_NOTES.md, each patch named by its gap.

    The state machine definition itself is executed unchanged (same Resource ARNs); only moto is patched.
    """
    return patch_moto_gaps(monkeypatch)


def patch_moto_gaps(monkeypatch: pytest.MonkeyPatch) -> MotoStepFunctionsGaps:
    """The patches of ``moto_step_functions_gaps``, for a fixture of any scope (``pytest.MonkeyPatch.context()``)."""
    from moto.core.utils import utcnow
    from moto.dms.models import FakeReplicationTask
    from moto.glue.models import FakeJob, FakeJobRun
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
        StateTaskService,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_glue import (
        StateTaskServiceGlue,
    )

    knobs = MotoStepFunctionsGaps(lambda_context=lambda name: FakeLambdaContext(function_name=name))

    # GAP 1: `aws-sdk:databasemigration:*` fails with "Unknown service: 'databasemigration'": moto maps only the
    # sfn/states service names to boto3 names. Step Functions calls DMS "databasemigration"; boto3 calls it "dms".
    monkeypatch.setitem(StateTaskService._SERVICE_NAME_SFN_TO_BOTO_OVERRIDES, "databasemigration", "dms")

    # GAP 2: `glue:startJobRun.sync` fails with "'NoneType' object has no attribute 'interrupt_all'": moto's
    # callback base class interrupts a wait-for-task-token endpoint Glue never has. Run the same sync
    # resolver moto already has (poll GetJobRun until terminal; FAILED/TIMEOUT/ERROR raise States.TaskFailed).
    def glue_sync(
        self: Any, env: Any, resource_runtime_part: Any, normalised_parameters: Any, state_credentials: Any
    ) -> None:
        resolver = self._build_sync_resolver(env, resource_runtime_part, normalised_parameters, state_credentials)
        while env.is_running():
            result = resolver()
            if result:
                env.stack.append(result)
                return
            time.sleep(0.05)

    monkeypatch.setattr(StateTaskServiceGlue, "_eval_integration_pattern", glue_sync)

    # GAP 3: Glue job runs always end SUCCEEDED. Runs of the jobs in `failing_jobs` end FAILED instead.
    # (Not a gap: while here, each run's start and its first terminal state are recorded in `glue_timeline`,
    # so tests can prove which jobs ran in which order and that no two overlapped.)
    original_job_run = FakeJobRun.as_dict
    original_start_job_run = FakeJob.start_job_run

    def start_job_run(self: Any, **kwargs: Any) -> str:
        # GAP 3c: moto refuses a run beyond MaxConcurrentRuns by its own run status, which ends SUCCEEDED at once,
        # so it never refuses a second run while the first is still RUNNING as these patches report it. Glue does
        # (ConcurrentRunsExceededException, with the job's MaxConcurrentRuns, 1 for every job of the stack): refuse
        # by the state the runs report, so a second loop or a hand-started run meets what it meets on AWS.
        from moto.glue.exceptions import ConcurrentRunsExceededException

        active = [run for run in self.job_runs if run.as_dict()["JobRunState"] in ("STARTING", "RUNNING", "STOPPING")]
        if len(active) >= self.execution_property.get("MaxConcurrentRuns", 1):
            raise ConcurrentRunsExceededException(f"Job with name {self.name} already running")
        run_id: str = original_start_job_run(self, **kwargs)
        knobs.glue_timeline.append(("start", self.name, run_id))
        if knobs.glue_runner is not None:
            # GAP 3b: moto runs no job. Run its entry point here, synchronously: the run is terminal before
            # the state machine's first GetJobRun, as a finished Glue run would be.
            runner, arguments = knobs.glue_runner, {**self.default_arguments, **(kwargs.get("arguments") or {})}

            def run() -> None:
                try:
                    runner(self.name, arguments)
                except Exception as exc:
                    knobs.failed_runs[run_id] = f"{type(exc).__name__}: {exc}"

            if knobs.glue_runner_in_background:
                thread = threading.Thread(target=run, name=f"glue-run-{run_id}", daemon=True)
                knobs.runner_threads[run_id] = thread
                thread.start()
            else:
                run()
        return run_id

    def job_run_as_dict(self: Any) -> dict[str, Any]:
        run = original_job_run(self)
        runner = knobs.runner_threads.get(self.job_run_id)
        if runner is not None and runner.is_alive():
            run["JobRunState"] = "RUNNING"
            return run
        running_for = knobs.running_seconds.get(self.job_name, 0.0)
        if running_for and (utcnow() - self.started_on).total_seconds() < running_for:
            run["JobRunState"] = "RUNNING"
            return run
        if self.job_name in knobs.job_execution_seconds:
            run["ExecutionTime"] = knobs.job_execution_seconds[self.job_name]
        if self.job_run_id in knobs.execution_seconds:
            run["ExecutionTime"] = knobs.execution_seconds[self.job_run_id]
        if self.job_name in knobs.failing_jobs:
            run["JobRunState"] = "FAILED"
            run["ErrorMessage"] = f"simulated failure of {self.job_name}"
        if self.job_run_id in knobs.failed_runs:
            run["JobRunState"] = "FAILED"
            run["ErrorMessage"] = knobs.failed_runs[self.job_run_id]
        ended = ("end", self.job_name, self.job_run_id)
        if run["JobRunState"] in ("SUCCEEDED", "FAILED") and ended not in knobs.glue_timeline:
            knobs.glue_timeline.append(ended)
        return run

    monkeypatch.setattr(FakeJob, "start_job_run", start_job_run)
    monkeypatch.setattr(FakeJobRun, "as_dict", job_run_as_dict)

    # GAP 4: DescribeReplicationTasks always reports FullLoadProgressPercent 100, started or not. Tasks listed in
    # `full_load_percent` report that value instead; tasks in `never_started` are "ready" without statistics.
    original_task = FakeReplicationTask.to_dict

    def task_as_dict(self: Any) -> dict[str, Any]:
        task = original_task(self)
        if self.arn in knobs.never_started:  # as DMS describes a task created and never started: no statistics
            task["Status"] = "ready"
            del task["ReplicationTaskStats"]
        if self.arn in knobs.full_load_percent:
            task["ReplicationTaskStats"]["FullLoadProgressPercent"] = knobs.full_load_percent[self.arn]
        return task

    monkeypatch.setattr(FakeReplicationTask, "to_dict", task_as_dict)

    # GAPS 5, 6, 7 and 10 (Lambda code, the sfn names' casing, timestamps in results, unnamed executions) are
    # closed where the interpreter makes its calls, on botocore's event hooks: task_calls.py.
    import botocore.handlers

    monkeypatch.setattr(botocore.handlers, "BUILTIN_HANDLERS", [*botocore.handlers.BUILTIN_HANDLERS, *knobs.handlers()])
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # a session made before has none of them

    # GAP 9: `$$.Execution.StartTime` is a Python datetime in moto; AWS gives an ISO 8601 string
    # ("2024-03-01T12:00:00.000Z"), which the definition splits into year and month for the hand-over time.
    # Give it the AWS form; `execution_start_time` lets a test choose the start (moto has no clock to move).
    from moto.stepfunctions.parser.backend.execution import Execution

    original_details = Execution.get_start_execution_details

    def start_details(self: Any) -> Any:
        details = original_details(self)
        started = knobs.execution_start_time or details.start_time
        details.start_time = started.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return details

    monkeypatch.setattr(Execution, "get_start_execution_details", start_details)

    # GAP 11: Choice timestamp comparisons parse only "%Y-%m-%dT%H:%M:%SZ" in moto, so `$$.State.EnteredTime`
    # (which carries fractions of a second, in AWS as in moto) never compares. AWS accepts RFC 3339 timestamps
    # with fractional seconds; parse them as such.
    from moto.stepfunctions.parser.asl.component.state.choice.comparison.operator.implementations.is_operator import (
        IsTimestamp,
    )

    def rfc3339(string: str) -> datetime.datetime | None:
        try:
            return datetime.datetime.fromisoformat(string).astimezone(datetime.UTC).replace(tzinfo=None)
        except ValueError:
            return None

    monkeypatch.setattr(IsTimestamp, "string_to_timestamp", staticmethod(rfc3339))

    # GAP 12: moto caps a message's total visibility at 12 hours from when it was *sent*; SQS counts the 12 hours
    # from the receive (the ChangeMessageVisibility reference), so a message that waited in the queue can still be
    # extended while the CDC job applies its file. Count from the latest receive, as SQS does.
    from moto.core.utils import unix_time_millis
    from moto.sqs.exceptions import InvalidParameterValue, ReceiptHandleIsInvalid
    from moto.sqs.models import Message, SQSBackend

    original_mark_received = Message.mark_received

    def mark_received(self: Any, visibility_timeout: int | None = None) -> None:
        self.last_received_ms = int(unix_time_millis())
        original_mark_received(self, visibility_timeout)

    def change_message_visibility(self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int) -> None:
        queue = self.get_queue(queue_name)
        for message in queue._messages:
            if message.had_receipt_handle(receipt_handle):
                received = getattr(message, "last_received_ms", message.sent_timestamp)
                if unix_time_millis() + int(visibility_timeout) * 1000 - received > 43200 * 1000:
                    raise InvalidParameterValue(
                        f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                        "VisibilityTimeout for the message is beyond the limit [43200 seconds]"
                    )
                message.change_visibility(visibility_timeout)
                if message.visible and message in queue.pending_messages:
                    queue.pending_messages.remove(message)
                return
        raise ReceiptHandleIsInvalid

    monkeypatch.setattr(Message, "mark_received", mark_received)
    monkeypatch.setattr(SQSBackend, "change_message_visibility", change_message_visibility)

    # GAP 13: a FIFO receive in moto frees a message group only while it scans the queue, when it meets a message
    # whose visibility ended: if the group's messages time out together, the earlier ones were already skipped
    # as "group in flight" and the last one is delivered first. In SQS a message whose visibility ended is no
    # longer in flight, so the group is free from the start: free it before the scan.
    original_receive = SQSBackend.receive_message

    def receive_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        queue = self.get_queue(queue_name)
        for message in [m for m in queue.messages if m.visible and m in queue.pending_messages]:
            queue.pending_messages.remove(message)
        return original_receive(self, queue_name, *args, **kwargs)

    monkeypatch.setattr(SQSBackend, "receive_message", receive_message)

    # GAP 14: moto's EventBridge delivers to log groups, archives, SQS queues, buses and API destinations, never to
    # an SNS topic target (the rules that alert: Glue job failures, DMS task stops). Publish a matched event to its
    # topic as EventBridge does (the event itself as the message); moto's SNS then delivers it to subscribers.
    from moto.events.models import Rule
    from moto.sns.models import sns_backends
    from moto.utilities.arns import parse_arn

    original_send_to_targets = Rule.send_to_targets

    def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
        targets = list(self.targets)
        topics = [t for t in targets if parse_arn(t["Arn"]).service == "sns"]
        self.targets = [t for t in targets if t not in topics]  # moto raises NotImplementedError on the others
        try:
            original_send_to_targets(self, original_event, transform_input)
        finally:
            self.targets = targets
        if not self.event_pattern.matches_event(original_event):
            return
        for target in topics:
            arn = parse_arn(target["Arn"])
            topic = sns_backends[arn.account][arn.region].topics[target["Arn"]]
            topic.publish(message=json.dumps(original_event, default=str))

    monkeypatch.setattr(Rule, "send_to_targets", send_to_targets)

    # Not a gap: the test clock for Retry intervals (RunCdcJob waits 60, 120, 240 s between failed runs).
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    class RetryClock:
        @staticmethod
        def sleep(seconds: float) -> None:
            if knobs.retry_waits is None:
                time.sleep(seconds)
            else:
                knobs.retry_waits.append(seconds)

    monkeypatch.setattr(retrier_decl, "time", RetryClock)

    # GAP 8 (no patch): a JSONPath such as `$.ReplicationTasks[0].Status` yields a one-element list in moto.
    # The definition avoids indexed paths: a Map state classifies every task and States.ArrayContains decides.
    return knobs


# ----------------------------------------------------------------------------------- the pipeline


@dataclass
class Pipeline:
    """The deployed stack, in moto: what the tests drive and inspect."""

    sfn: Any
    sqs: Any
    s3: Any
    glue: Any
    dms: Any
    state_machine_arn: str
    queue_url: str
    dlq_url: str
    alerts_url: str
    bronze_bucket: str
    artifacts_bucket: str
    task_arn: str
    full_load_job: str
    cdc_job: str
    maintenance_job: str
    gold_job: str
    gaps: MotoStepFunctionsGaps
    started: int = 0
    # What the fake CDC job (fake_cdc_job) did: the bronze keys of the messages each run consumed, per run.
    cdc_runs: list[list[str]] = field(default_factory=list)
    cdc_failures_left: int = 0  # the next runs of the CDC job that fail (before consuming anything)
    verify_job: str = "cdclake-verify"

    def send_file(self, key: str, size: int) -> None:
        """Announce a bronze file of ``size`` bytes (the event carries the size; the object itself is a stand-in)."""
        body = object_created_event(self.bronze_bucket, key, size)
        self.s3.put_object(Bucket=self.bronze_bucket, Key=key, Body=b"x")
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body, MessageGroupId="dms")

    def start(self, execution_input: dict[str, Any]) -> str:
        self.started += 1
        arn: str = self.sfn.start_execution(
            stateMachineArn=self.state_machine_arn, name=f"run-{self.started}", input=json.dumps(execution_input)
        )["executionArn"]
        return arn

    def wait_until_done(self, execution_arn: str, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            described: dict[str, Any] = self.sfn.describe_execution(executionArn=execution_arn)
            if described["status"] != "RUNNING":
                return described
            time.sleep(0.05)
        raise AssertionError(f"{execution_arn} still running after {timeout}s: {self.states_entered(execution_arn)}")

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)[
            "events"
        ]
        return events

    def states_entered(self, execution_arn: str) -> list[str]:
        return [
            e["stateEnteredEventDetails"]["name"]
            for e in self.history(execution_arn)
            if "stateEnteredEventDetails" in e
        ]

    def wait_for_state(self, execution_arn: str, state: str, times: int = 1, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.states_entered(execution_arn).count(state) < times:
            if time.monotonic() > deadline:
                raise AssertionError(f"{state} not entered {times}x: {self.states_entered(execution_arn)}")
            time.sleep(0.05)

    def successor_of(self, execution_arn: str, timeout: float = 20) -> str:
        """The execution that ``execution_arn`` handed over to (its input names it as predecessor)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for execution in self.sfn.list_executions(stateMachineArn=self.state_machine_arn)["executions"]:
                described = self.sfn.describe_execution(executionArn=execution["executionArn"])
                if json.loads(described["input"]).get("predecessor") == execution_arn:
                    return str(execution["executionArn"])
            time.sleep(0.05)
        raise AssertionError(f"{execution_arn} handed over to no execution: {self.states_entered(execution_arn)}")

    def input_of(self, execution_arn: str) -> dict[str, Any]:
        described = self.sfn.describe_execution(executionArn=execution_arn)
        return dict(json.loads(described["input"]))

    def state_input(self, execution_arn: str, state: str) -> dict[str, Any]:
        """The input of the last time ``state`` was entered."""
        entered = [
            e["stateEnteredEventDetails"]
            for e in self.history(execution_arn)
            if e.get("stateEnteredEventDetails", {}).get("name") == state
        ]
        assert entered, f"{state} was not entered: {self.states_entered(execution_arn)}"
        return dict(json.loads(entered[-1]["input"]))

    def job_runs(self, job_name: str) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.glue.get_job_runs(JobName=job_name)["JobRuns"]
        return runs

    def queue_bodies(self, queue_url: str | None = None) -> list[dict[str, Any]]:
        """Every message currently visible in a queue (received once, with a 0 s visibility, so they stay)."""
        bodies = []
        while True:
            got = self.sqs.receive_message(
                QueueUrl=queue_url or self.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0
            ).get("Messages", [])
            new = [json.loads(m["Body"]) for m in got]
            if not new or all(b in bodies for b in new):
                return bodies
            bodies.extend(b for b in new if b not in bodies)

    def alerts(self) -> list[dict[str, Any]]:
        got = self.sqs.receive_message(QueueUrl=self.alerts_url, MaxNumberOfMessages=10).get("Messages", [])
        return [json.loads(m["Body"]) for m in got]


def fake_cdc_job(pipeline: Pipeline) -> Callable[[str, dict[str, str]], None]:
    """A stand-in for the CDC Glue job's queue contract (moto runs no job): given ``--queue_url`` it receives every
    message and deletes each one, as the job does after its file's commit; a failing run consumes nothing."""

    def run(job_name: str, arguments: dict[str, str]) -> None:
        if job_name != pipeline.cdc_job:
            return
        if pipeline.cdc_failures_left > 0:
            pipeline.cdc_failures_left -= 1
            raise RuntimeError("simulated failure of cdclake-cdc")
        consumed = []
        while messages := pipeline.sqs.receive_message(
            QueueUrl=arguments["--queue_url"], MaxNumberOfMessages=10, VisibilityTimeout=30
        ).get("Messages", []):
            for message in messages:
                consumed.append(json.loads(message["Body"])["detail"]["object"]["key"])
                pipeline.sqs.delete_message(QueueUrl=arguments["--queue_url"], ReceiptHandle=message["ReceiptHandle"])
        pipeline.cdc_runs.append(consumed)

    return run


def render_definition(substitutions: dict[str, str]) -> str:
    """What CloudFormation does with DefinitionSubstitutions: replace each ${Name} in the definition text."""
    text = DEFINITION.read_text(encoding="utf-8")
    for name, value in substitutions.items():
        text = text.replace("${" + name + "}", value)
    return text


@pytest.fixture
def pipeline(moto_step_functions_gaps: MotoStepFunctionsGaps, request: pytest.FixtureRequest) -> Iterator[Pipeline]:
    """The stack's resources in moto, the state machine created from the real definition file.

    Settings substitutions can be overridden per test: ``@pytest.mark.parametrize("pipeline", [{...}], indirect=True)``;
    ``SweepEveryIterations`` and ``MaintenanceEveryHours`` there set the CheckWork function's environment (0 and 1
    here unless a test sets them: a fresh execution's first maintenance is an hour away; a test makes it due by
    handing in an old ``maintenance.last``).
    The CDC job's runs are ``fake_cdc_job``.
    """
    settings = dict(getattr(request, "param", {}))
    sweep_every = settings.pop("SweepEveryIterations", "0")
    maintenance_every = settings.pop("MaintenanceEveryHours", "1")
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(
            RoleName="cdclake-test",
            AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
        )["Role"]["Arn"]
        s3 = boto3.client("s3", region_name=REGION)
        bronze, artifacts = "cdclake-bronze", "cdclake-artifacts"
        for bucket in (bronze, artifacts):
            s3.create_bucket(Bucket=bucket)
        sqs = boto3.client("sqs", region_name=REGION)
        dlq_url = sqs.create_queue(QueueName="cdclake-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        queue_url = sqs.create_queue(
            QueueName="cdclake-files.fifo",
            Attributes={
                "FifoQueue": "true",
                "ContentBasedDeduplication": "true",
                "VisibilityTimeout": "60",
                # The deployed redrive policy: how many receives a message survives is part of the design.
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVE_COUNT}),
            },
        )["QueueUrl"]
        sns = boto3.client("sns", region_name=REGION)
        topic = sns.create_topic(Name="cdclake-alerts")["TopicArn"]
        alerts_url = sqs.create_queue(QueueName="alerts-inbox")["QueueUrl"]
        alerts_arn = sqs.get_queue_attributes(QueueUrl=alerts_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=alerts_arn)
        glue = boto3.client("glue", region_name=REGION)
        for job in ("cdclake-full-load", "cdclake-cdc", "cdclake-maintenance", "cdclake-gold", "cdclake-verify"):
            glue.create_job(
                Name=job,
                Role=role,
                Command={"Name": "glueetl", "ScriptLocation": f"s3://{artifacts}/glue/{job}.py"},
                ExecutionProperty={"MaxConcurrentRuns": 1},
                # As template.yaml: the CDC job follows the file queue (the state machine passes no arguments).
                DefaultArguments={"--queue_url": queue_url} if job == "cdclake-cdc" else {},
            )
        dms = boto3.client("dms", region_name=REGION)
        task_arn = a_started_replication_task(dms)

        lam = boto3.client("lambda", region_name=REGION)
        work_check_arn = lam.create_function(
            FunctionName="cdclake-work_check",
            Runtime="python3.11",
            Role=role,
            Handler="app.handler",
            Code={"ZipFile": b"in-process (see moto_step_functions_gaps)"},
            # The environment template.yaml gives it (QUEUE_URL from the Globals).
            Environment={
                "Variables": {
                    "QUEUE_URL": queue_url,
                    "CDC_JOB_NAME": "cdclake-cdc",
                    "SWEEP_EVERY_ITERATIONS": sweep_every,
                    "RELOAD_REQUESTS_URI": f"s3://{artifacts}/state/reloads.json",
                    "FULL_LOAD_JOB_NAME": "cdclake-full-load",
                    "VERIFY_JOB_NAME": "cdclake-verify",
                    "MAINTENANCE_EVERY_HOURS": maintenance_every,
                    "CDC_MAX_RUN_SECONDS": "3600",  # moto's runs report 123 s: none stopped there unless a test says
                }
            },
        )["FunctionArn"]
        moto_step_functions_gaps.lambda_handlers["cdclake-work_check"] = load_handler_module("work_check").handler

        sfn = boto3.client("stepfunctions", region_name=REGION)
        name = "cdclake-pipeline"
        state_machine_arn = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}"
        definition = render_definition(
            {
                "Partition": "aws",
                "StateMachineArn": state_machine_arn,
                "ReplicationTaskArns": task_arn,
                "HasReplicationTasks": "true",
                "AlertTopicArn": topic,
                "FullLoadJobName": "cdclake-full-load",
                "CdcJobName": "cdclake-cdc",
                "WorkCheckFunctionArn": work_check_arn,
                "MaintenanceJobName": "cdclake-maintenance",
                "PollSeconds": "1",
                "MaxIterations": "3",
                "MaxHistoryEvents": "20000",
                "GoldJobName": "cdclake-gold",
                "GoldEveryIterations": "0",  # off unless a test turns it on: the gold tests below
                "VerifyJobName": "cdclake-verify",
                "VerifyAfterFullLoad": "true",  # the template's value with a source secret (the default)
                "HandOverWaitSeconds": "1",  # the template's 5 s, shortened as PollSeconds is
                **settings,
            }
        )
        created = sfn.create_state_machine(name=name, definition=definition, roleArn=role)["stateMachineArn"]
        assert created == state_machine_arn
        pipeline = Pipeline(
            sfn=sfn, sqs=sqs, s3=s3, glue=glue, dms=dms, state_machine_arn=state_machine_arn,
            queue_url=queue_url, dlq_url=dlq_url, alerts_url=alerts_url, bronze_bucket=bronze,
            artifacts_bucket=artifacts, task_arn=task_arn, full_load_job="cdclake-full-load",
            cdc_job="cdclake-cdc", maintenance_job="cdclake-maintenance", gold_job="cdclake-gold",
            gaps=moto_step_functions_gaps,
        )  # fmt: skip
        moto_step_functions_gaps.glue_runner = fake_cdc_job(pipeline)
        moto_step_functions_gaps.retry_waits = []  # Retry intervals recorded, not slept: tests assert them
        yield pipeline
        # Stop every execution before moto's backends go away; repeat while a hand-over starts a new
        # one, or it would run on into the next test's fresh backends (and alert there).
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            running = sfn.list_executions(stateMachineArn=state_machine_arn, statusFilter="RUNNING")["executions"]
            if not running:
                break
            for execution in running:
                # moto gap: stopping an execution whose worker has just finished raises inside moto
                # ('NoneType' object has no attribute 'set_stop'); it is ending anyway.
                with contextlib.suppress(AttributeError):
                    sfn.stop_execution(executionArn=execution["executionArn"])
            time.sleep(0.2)

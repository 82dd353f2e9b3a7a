"""The CheckWork Lambda handler against moto SQS and Glue, with a fake Lambda context."""

from __future__ import annotations

import datetime
import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from conftest import FakeLambdaContext, MotoStepFunctionsGaps, load_handler_module, patch_moto_gaps
from lanes import decide_lanes, job_active, maintenance_due
from moto import mock_aws
from reloads import FullLoadRun
from work import QueueDepth, WorkCheckSettings, decide

from s3_events import object_created_event

CDC_JOB = "cdclake-test-cdc"


@dataclass
class Stack:
    sqs: Any
    glue: Any
    queue_url: str
    gaps: MotoStepFunctionsGaps

    def queue_file(self, key: str) -> None:
        body = object_created_event("bronze", key, 100)
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body, MessageGroupId="dms")

    def start_cdc_run(self) -> str:
        return str(self.glue.start_job_run(JobName=CDC_JOB)["JobRunId"])


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """The file queue and the CDC job in moto, and the function's environment as template.yaml sets it."""
    gaps = patch_moto_gaps(monkeypatch)  # Glue runs that stay RUNNING (moto ends them at once)
    gaps.running_seconds[CDC_JOB] = 60
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        glue = boto3.client("glue", region_name="us-east-1")
        url = sqs.create_queue(
            QueueName="files.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
        )["QueueUrl"]
        glue.create_job(Name=CDC_JOB, Role="arn:aws:iam::123456789012:role/glue", Command={"Name": "glueetl"})
        monkeypatch.setenv("QUEUE_URL", url)
        monkeypatch.setenv("CDC_JOB_NAME", CDC_JOB)
        monkeypatch.setenv("SWEEP_EVERY_ITERATIONS", "3")
        monkeypatch.setenv("CDC_MAX_RUN_SECONDS", "3600")
        yield Stack(sqs, glue, url, gaps)


def check_work(since_sweep: int = 0, execution_id: str = "") -> dict[str, Any]:
    event = {"sinceSweep": since_sweep, "executionId": execution_id}
    result: dict[str, Any] = load_handler_module("work_check").handler(event, FakeLambdaContext())
    # No reload request in these tests: the full-load lane says so (tests/aws/test_reload_check.py has the rest).
    assert result.pop("reload")["reason"] == "no reload requested"
    # No other lane and no maintenance clock either (no FULL_LOAD_JOB_NAME, VERIFY_JOB_NAME, MAINTENANCE_EVERY_HOURS)
    assert result.pop("lanes") == {"busy": False, "reason": "no other lane is running"}
    assert result.pop("maintenance")["due"] is False
    return result


def test_queued_files_start_a_run(stack: Stack) -> None:
    # GIVEN two files queued and no CDC run
    stack.queue_file("dms/s/orders/20240301-120000100.csv")
    stack.queue_file("dms/s/orders/20240301-120000200.csv")
    # WHEN the state machine checks for work THEN a run may start
    assert check_work() == {
        "start": True, "reason": "files queued", "visible": 2, "inFlight": 0, "jobRunning": False, "sweep": False,
    }  # fmt: skip


def test_messages_only_in_flight_start_no_run(stack: Stack) -> None:
    # GIVEN a message received and not deleted yet (a run that died a moment after its receive), nothing visible
    stack.queue_file("dms/s/orders/20240301-120000100.csv")
    stack.sqs.receive_message(QueueUrl=stack.queue_url, VisibilityTimeout=600)
    # WHEN the state machine checks THEN no run starts: it could receive nothing of the group until the message
    # is visible again, and then that message starts one
    result = check_work()
    assert (result["start"], result["visible"], result["inFlight"]) == (False, 0, 1)
    assert result["reason"] == "no work: messages only in flight (they start a run once visible again)"
    # AND a sweep that is due still starts one
    assert (check_work(since_sweep=3)["start"], check_work(since_sweep=3)["reason"]) == (True, "sweep due")


def test_no_run_starts_while_one_is_active(stack: Stack) -> None:
    # GIVEN files queued and a CDC run still RUNNING (the previous iteration's, or one started by hand)
    stack.queue_file("dms/s/orders/20240301-120000100.csv")
    stack.start_cdc_run()
    # WHEN the state machine checks THEN no second run starts, even with a sweep due
    result = check_work(since_sweep=99)
    assert (result["start"], result["jobRunning"], result["reason"]) == (False, True, "a CDC job run is active")
    assert result["visible"] == 1


def test_the_emulated_glue_refuses_a_second_run_while_one_runs_as_glue_does(stack: Stack) -> None:
    # GIVEN a CDC run still RUNNING (MaxConcurrentRuns 1, Glue's default and the stack's for every job)
    first = stack.start_cdc_run()
    # WHEN a second run is started (a second loop, a run by hand) THEN Glue refuses it, as ConcurrentRunsExceeded
    with pytest.raises(stack.glue.exceptions.ConcurrentRunsExceededException):
        stack.start_cdc_run()
    # AND once the first has ended, a run may start again
    stack.gaps.running_seconds.clear()
    assert stack.start_cdc_run() != first


def test_an_ended_run_does_not_block(stack: Stack) -> None:
    # GIVEN an earlier run that has ended (SUCCEEDED) and a queued file
    stack.gaps.running_seconds.clear()
    stack.start_cdc_run()
    assert [r["JobRunState"] for r in stack.glue.get_job_runs(JobName=CDC_JOB)["JobRuns"]] == ["SUCCEEDED"]
    stack.queue_file("dms/s/orders/20240301-120000100.csv")
    # WHEN the state machine checks THEN a new run may start
    result = check_work()
    assert (result["start"], result["jobRunning"]) == (True, False)


@pytest.mark.parametrize(
    ("since_sweep", "start", "reason"), [(2, False, "no work"), (3, True, "sweep due"), (40, True, "sweep due")]
)
def test_an_empty_queue_starts_a_sweep_run_every_n_iterations(
    stack: Stack, since_sweep: int, start: bool, reason: str
) -> None:
    # GIVEN an empty queue, no active run, and SWEEP_EVERY_ITERATIONS 3
    # WHEN the state machine checks after since_sweep iterations without a run
    result = check_work(since_sweep=since_sweep)
    # THEN a run starts once the sweep is due (it lists bronze: files whose S3 event never reached the queue)
    assert (result["start"], result["reason"], result["sweep"]) == (start, reason, start)
    assert (result["visible"], result["inFlight"], result["jobRunning"]) == (0, 0, False)


@pytest.mark.parametrize(
    ("state", "seconds", "start"), [("SUCCEEDED", 3600, True), ("SUCCEEDED", 3599, False), ("FAILED", 3700, False)]
)
def test_a_run_that_stopped_at_its_maximum_run_time_is_followed_by_a_sweep_at_once(
    stack: Stack, state: str, seconds: int, start: bool
) -> None:
    # GIVEN an empty queue, no sweep due, and the newest CDC run ended after `seconds` (CdcMaxRunSeconds 3600): a
    # run that stopped at its maximum may leave files whose events it had already taken off the queue
    stack.gaps.running_seconds.clear()
    if state == "FAILED":
        stack.gaps.failing_jobs.add(CDC_JOB)
    stack.gaps.execution_seconds[stack.start_cdc_run()] = seconds
    # WHEN the state machine checks
    result = check_work(since_sweep=0)
    # THEN a sweep starts at once after a successful run that lasted its maximum, and no other run starts one
    # (a failed run is the failure path's: alerted, and swept when due)
    reason = "sweep: the last CDC run stopped at its maximum run time (it may have left files)"
    assert (result["start"], result["sweep"], result["reason"]) == (start, start, reason if start else "no work")


def test_a_sweep_every_zero_iterations_never_sweeps(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEP_EVERY_ITERATIONS", "0")
    assert check_work(since_sweep=10_000)["start"] is False


def test_the_decision_from_the_counts_alone() -> None:
    # GIVEN the counts WHEN decided THEN start = not running and (visible or sweep due); in flight alone is no work
    idle = QueueDepth(visible=0, in_flight=0)
    assert decide(idle, job_running=False, since_sweep=0, sweep_every=1).start is False
    assert decide(idle, job_running=False, since_sweep=1, sweep_every=1).start is True
    assert decide(QueueDepth(5, 0), job_running=True, since_sweep=0, sweep_every=0).start is False
    assert decide(QueueDepth(0, 3), job_running=False, since_sweep=0, sweep_every=0).start is False
    assert decide(QueueDepth(1, 3), job_running=False, since_sweep=0, sweep_every=0).start is True
    # a run that stopped at its maximum run time: a sweep at once, never beside an active run
    assert decide(idle, job_running=False, since_sweep=0, sweep_every=0, stopped_at_max=True).sweep is True
    assert decide(idle, job_running=True, since_sweep=0, sweep_every=0, stopped_at_max=True).start is False


def test_only_the_newest_ended_run_says_whether_a_sweep_is_due_at_once(stack: Stack) -> None:
    # GIVEN a run that stopped at its maximum, then the sweep it started, which ended quickly
    stack.gaps.running_seconds.clear()
    stack.gaps.execution_seconds[stack.start_cdc_run()] = 3600
    assert check_work()["start"] is True
    stack.gaps.execution_seconds[stack.start_cdc_run()] = 40
    # WHEN the state machine checks again THEN no further sweep starts
    assert (check_work()["start"], check_work()["reason"]) == (False, "no work")


def test_settings_are_validated_once_with_a_clear_message() -> None:
    assert WorkCheckSettings.from_environment({"QUEUE_URL": "q", "CDC_JOB_NAME": "j"}).sweep_every_iterations == 60
    with pytest.raises(ValueError, match="CDC_JOB_NAME"):
        WorkCheckSettings.from_environment({"QUEUE_URL": "q"})
    with pytest.raises(ValueError, match="SWEEP_EVERY_ITERATIONS must be 0"):
        WorkCheckSettings.from_environment({"QUEUE_URL": "q", "CDC_JOB_NAME": "j", "SWEEP_EVERY_ITERATIONS": "-1"})
    with pytest.raises(ValueError, match="CDC_MAX_RUN_SECONDS must be 0"):
        WorkCheckSettings.from_environment({"QUEUE_URL": "q", "CDC_JOB_NAME": "j", "CDC_MAX_RUN_SECONDS": "-1"})


def test_a_payload_without_since_sweep_is_rejected(stack: Stack) -> None:
    with pytest.raises(ValueError, match="sinceSweep"):
        load_handler_module("work_check").handler({"executionId": "x"}, FakeLambdaContext())
    with pytest.raises(ValueError, match="sinceSweep"):
        load_handler_module("work_check").handler({"sinceSweep": -1}, FakeLambdaContext())


def test_queue_depth_is_published_as_metrics_and_logged_with_the_execution(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN two queued files, in the environment prod
    monkeypatch.setenv("ENVIRONMENT_NAME", "prod")
    stack.queue_file("dms/s/orders/20240301-120000100.csv")
    stack.queue_file("dms/s/items/20240301-120000100.csv")
    capsys.readouterr()
    module = load_handler_module("work_check")
    stream = io.StringIO()  # the Logger's own handler holds the stdout of its first import: read an extra one
    handler = logging.StreamHandler(stream)
    handler.setFormatter(module.logger.registered_formatter)
    module.logger.addHandler(handler)
    execution = "arn:aws:states:us-east-1:123456789012:execution:cdclake-dev-pipeline:run-9"
    # WHEN the state machine checks
    try:
        check_work(execution_id=execution)
    finally:
        module.logger.removeHandler(handler)
    # THEN the counts are metrics (EMF on stdout) and the log line carries the execution as correlation id
    [emf] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    assert (emf["QueueVisibleMessages"], emf["QueueInFlightMessages"]) == ([2.0], [0.0])
    # AND they carry the Environment dimension, as every metric of the stack (ENVIRONMENT_NAME: EnvironmentName)
    [directive] = emf["_aws"]["CloudWatchMetrics"]
    assert "Environment" in directive["Dimensions"][0] and emf["Environment"] == "prod"
    [line] = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert (line["message"], line["correlation_id"], line["reason"]) == ("work checked", execution, "files queued")


# ------------------------------------------------------------------------ the serial lane: maintenance
NOW = datetime.datetime(2024, 3, 2, 12, 0, tzinfo=datetime.UTC)


def test_maintenance_is_due_its_hours_after_it_last_ran_or_after_the_execution_started() -> None:
    # last ran 23 h ago (a state machine timestamp), every 24 h: not yet; 25 h ago: due
    assert maintenance_due(24, "2024-03-01T13:00:00.123Z", "", NOW).due is False
    assert maintenance_due(24, "2024-03-01T11:00:00.000Z", "", NOW).due is True
    assert maintenance_due(24, "2024-03-01T13:00:00.000Z", "", NOW).reason == "due at 2024-03-02T13:00:00Z"
    # never ran in this line of executions: the clock starts with the execution
    assert maintenance_due(24, "", "2024-03-02T11:00:00.000Z", NOW).due is False
    assert maintenance_due(1, "", "2024-03-02T11:00:00.000Z", NOW).due is True
    # neither known: due; 0 hours: never
    assert maintenance_due(24, "", "", NOW).due is True
    assert maintenance_due(0, "2020-01-01T00:00:00Z", "", NOW).due is False


def test_maintenance_waits_while_a_full_load_or_verify_run_is_active_or_a_reload_starts() -> None:
    running = FullLoadRun("RUNNING", "s.t", NOW)
    ended = FullLoadRun("SUCCEEDED", "s.t", NOW)
    assert decide_lanes([ended], verify_active=False, reload_starts=False).busy is False
    assert decide_lanes([running], verify_active=False, reload_starts=False).reason == "a full-load run is active"
    assert decide_lanes([ended], verify_active=False, reload_starts=True).reason == "a reload starts now"
    assert decide_lanes([], verify_active=True, reload_starts=False).reason == "a verify run is active"


def test_a_job_that_does_not_exist_has_no_active_run(stack: Stack) -> None:
    assert job_active(stack.glue, "cdclake-no-such-job") is False
    assert job_active(stack.glue, "") is False
    stack.start_cdc_run()  # RUNNING for 60 s (the fixture)
    assert job_active(stack.glue, CDC_JOB) is True


# ------------------------------------------------------------------------ DeployGuard: it fails safe
GUARD = load_handler_module("deploy_guard")
KEPT = "cdclake-dev-silverbucket-1a2b3c"


def guard_event(request: str, old: dict[str, str] | None = None, **properties: str) -> dict[str, Any]:
    defaults = {"SilverDatabase": "cdclake_dev", "GoldDatabase": "cdclake_dev_gold", "ExistingSilverBucket": "",
                "ExistingSilverDatabase": "false", "ExistingGoldDatabase": "false"}  # fmt: skip
    event = {"RequestType": request, "ResponseURL": "https://cloudformation-custom-resource-response.example/x",
             "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/cdclake-dev/1", "RequestId": "r",
             "LogicalResourceId": "DeployGuard", "ResourceProperties": {**defaults, **properties}}  # fmt: skip
    if old is not None:
        event["OldResourceProperties"] = {**defaults, **old}
    return event


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """What the guard answered CloudFormation (the PUT to the response URL is not sent), against moto's Glue."""
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(GUARD, "respond", lambda event, status, reason: sent.append((status, reason)))
    with mock_aws():
        yield sent


class BrokenGlue:
    """A Glue client whose every call fails as an account without glue:GetDatabase answers."""

    class exceptions:  # boto3 names it so
        EntityNotFoundException = type("EntityNotFoundException", (Exception,), {})

    def get_database(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}, "GetDatabase")


def kept_databases(bucket: str = KEPT) -> None:
    glue = boto3.client("glue", region_name="us-east-1")
    glue.create_database(DatabaseInput={"Name": "cdclake_dev", "LocationUri": f"s3://{bucket}/warehouse"})
    glue.create_database(DatabaseInput={"Name": "cdclake_dev_gold", "LocationUri": f"s3://{bucket}/gold"})


def test_an_update_the_guard_cannot_check_goes_on_and_the_reason_is_logged(
    answers: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN Glue refuses the guard's call (a policy changed, a throttle, an outage)
    monkeypatch.setattr(GUARD.boto3, "client", lambda service: BrokenGlue())
    # WHEN CloudFormation updates the stack, or rolls an update back (its own Update), or deletes it
    GUARD.handler(guard_event("Update", old={}), FakeLambdaContext())
    GUARD.handler(guard_event("Delete"), FakeLambdaContext())
    # THEN both go on: a FAILED Update would be sent again by the rollback (UPDATE_ROLLBACK_FAILED)
    assert [status for status, _ in answers] == ["SUCCESS", "SUCCESS"]
    [logged] = [r for r in caplog.records if r.getMessage() == "deploy guard could not check; the update goes on"]
    assert logged.exc_info is not None and "AccessDenied" in str(logged.exc_info[1])  # the reason, in its log
    assert answers[0][1] == "not checked (ClientError; see the deploy guard's log)"


def test_a_create_the_guard_cannot_check_fails_with_one_sentence(
    answers: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(GUARD.boto3, "client", lambda service: BrokenGlue())
    GUARD.handler(guard_event("Create"), FakeLambdaContext())
    [(status, reason)] = answers
    assert status == "FAILED" and reason.startswith("The deploy guard could not read the Glue databases (ClientError")
    assert reason.endswith("fix the cause and deploy again.") and reason.count(". ") == 0


def test_an_update_with_unexpected_properties_goes_on(answers: list[tuple[str, str]]) -> None:
    # GIVEN an Update without OldResourceProperties and one whose properties lack a key: not the guard's to refuse
    malformed = guard_event("Update", old={})
    del malformed["ResourceProperties"]["ExistingGoldDatabase"]
    no_old = guard_event("Update", ExistingSilverDatabase="true")
    kept_databases()
    GUARD.handler(malformed, FakeLambdaContext())
    GUARD.handler(no_old, FakeLambdaContext())
    assert [status for status, _ in answers] == ["SUCCESS", "SUCCESS"]


def test_an_update_that_brings_a_collision_is_refused_and_its_rollback_is_not(answers: list[tuple[str, str]]) -> None:
    # GIVEN a stack that adopted the kept databases and their bucket
    kept_databases()
    adopted = {"ExistingSilverDatabase": "true", "ExistingGoldDatabase": "true", "ExistingSilverBucket": KEPT}
    # WHEN an update drops ExistingSilverBucket (a new silver bucket beside the kept tables) THEN it is refused
    GUARD.handler(guard_event("Update", old=adopted, **{**adopted, "ExistingSilverBucket": ""}), FakeLambdaContext())
    # AND the rollback's Update, sending the stack's properties back, goes through
    GUARD.handler(guard_event("Update", old={**adopted, "ExistingSilverBucket": ""}, **adopted), FakeLambdaContext())
    # AND an update whose collision was there before it (the database moved out of band) is not refused either
    moved = {**adopted, "ExistingSilverBucket": "another-bucket"}
    GUARD.handler(guard_event("Update", old=moved, **moved), FakeLambdaContext())
    [(refused, sentence), (rollback, _), (before, _)] = answers
    assert refused == "FAILED" and f"ExistingSilverBucket={KEPT}" in sentence
    assert (rollback, before) == ("SUCCESS", "SUCCESS")

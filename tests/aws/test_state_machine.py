"""The state machine definition executed by moto's Step Functions interpreter, scenario by scenario.

The definition file is used as deployed (placeholders filled as CloudFormation would); moto's gaps are
worked around in the `moto_step_functions_gaps` fixture (conftest.py), and our Lambda handlers run in-process
(task_calls.py answers the state machine's task calls).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from conftest import Pipeline

pytestmark = pytest.mark.stack  # the real definition executed by moto: seconds a test


def cdc_key(table: str, stamp: str) -> str:
    return f"dms/sales/{table}/20240301-{stamp}.csv"


def work_checks(pipeline: Pipeline, execution: str, lane: str = "cdc") -> list[dict[str, Any]]:
    """What each CheckWork of the execution answered for the CDC lane, or (``lane`` "reload", "lanes",
    "maintenance") for the full-load lane, the other lanes, maintenance's clock, in order."""
    answers = [
        json.loads(e["stateExitedEventDetails"]["output"])["work"]
        for e in pipeline.history(execution)
        if e.get("stateExitedEventDetails", {}).get("name") == "CheckWork"
    ]
    if lane != "cdc":
        return [answer[lane] for answer in answers]
    return [{k: v for k, v in answer.items() if k not in ("reload", "lanes", "maintenance")} for answer in answers]


# Maintenance last ran long ago: due at once (MaintenanceEveryHours is 1 in the fixture), once silver changed.
LONG_AGO = "2024-01-01T00:00:00Z"


def queue_counts(pipeline: Pipeline) -> tuple[int, int]:
    """(visible, in flight) messages of the file queue."""
    counts = pipeline.sqs.get_queue_attributes(QueueUrl=pipeline.queue_url, AttributeNames=["All"])["Attributes"]
    return int(counts["ApproximateNumberOfMessages"]), int(counts["ApproximateNumberOfMessagesNotVisible"])


def test_full_load_in_progress_waits_and_checks_again(pipeline: Pipeline) -> None:
    # GIVEN a DMS task whose full load is at 40 %
    pipeline.gaps.full_load_percent[pipeline.task_arn] = 40
    # WHEN the pipeline starts
    execution = pipeline.start({})
    # THEN it waits and asks DMS again, and never starts the full-load job
    pipeline.wait_for_state(execution, "DescribeReplicationTasks", times=2)
    assert "WaitForFullLoad" in pipeline.states_entered(execution)
    assert pipeline.job_runs(pipeline.full_load_job) == []
    # WHEN the full load completes THEN the full-load job runs, and the CDC loop starts in a fresh execution
    pipeline.gaps.full_load_percent[pipeline.task_arn] = 100
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    assert len(pipeline.job_runs(pipeline.full_load_job)) == 1
    assert pipeline.states_entered(execution)[-3:] == ["MarkFullLoadDone", "StartSuccessor", "HandedOver"]
    pipeline.wait_for_state(pipeline.successor_of(execution), "WaitForFiles")


def test_full_load_complete_runs_the_full_load_job_once_then_cdc_starts_in_a_fresh_execution(
    pipeline: Pipeline,
) -> None:
    execution = pipeline.start({})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    assert "CheckWork" not in pipeline.states_entered(execution)
    # The successor starts with the whole history budget, knows the full load ran, and polls the empty queue.
    successor = pipeline.successor_of(execution)
    assert pipeline.input_of(successor)["fullLoadDone"] is True
    pipeline.wait_for_state(successor, "WaitForFiles", times=2)
    assert "DescribeReplicationTasks" not in pipeline.states_entered(successor)
    assert len(pipeline.job_runs(pipeline.full_load_job)) == 1
    assert pipeline.job_runs(pipeline.cdc_job) == []


def test_the_verify_job_is_started_after_the_full_load_and_the_cdc_loop_starts_without_waiting_for_it(
    pipeline: Pipeline,
) -> None:
    # GIVEN a stack with a source secret (VerifyAfterFullLoad true)
    # WHEN the full load completes
    execution = pipeline.start({})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN the verify job was started once, after the full-load job, with the job's own arguments
    [verify] = pipeline.job_runs(pipeline.verify_job)
    [full_load] = pipeline.job_runs(pipeline.full_load_job)
    assert verify["StartedOn"] >= full_load["StartedOn"] and verify.get("Arguments", {}) == {}
    entered = pipeline.states_entered(execution)
    assert entered[entered.index("RunFullLoadJob") :] == [
        "RunFullLoadJob", "IsVerifyAfterFullLoad", "StartVerifyJob", "MarkFullLoadDone", "StartSuccessor", "HandedOver",
    ]  # fmt: skip
    # AND the CDC loop runs in the successor, which never starts verify again
    successor = pipeline.successor_of(execution)
    pipeline.wait_for_state(successor, "WaitForFiles", times=2)
    assert len(pipeline.job_runs(pipeline.verify_job)) == 1
    assert "StartVerifyJob" not in pipeline.states_entered(successor)


def test_a_verify_job_that_cannot_start_never_stops_the_pipeline(pipeline: Pipeline) -> None:
    # GIVEN a verify job Glue refuses to start (here: it does not exist)
    pipeline.glue.delete_job(JobName=pipeline.verify_job)
    # WHEN the full load completes
    execution = pipeline.start({})
    # THEN the refusal is caught: the full load is marked done and the CDC loop starts; nothing alerts
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    entered = pipeline.states_entered(execution)
    assert entered[-4:] == ["StartVerifyJob", "MarkFullLoadDone", "StartSuccessor", "HandedOver"]
    assert "NotifyFailure" not in entered
    assert "EntityNotFound" in pipeline.state_input(execution, "MarkFullLoadDone")["verifyError"]["Error"]
    pipeline.wait_for_state(pipeline.successor_of(execution), "WaitForFiles")
    assert pipeline.alerts() == []


@pytest.mark.parametrize("pipeline", [{"VerifyAfterFullLoad": "false"}], indirect=True)
def test_without_a_source_secret_no_verify_job_runs(pipeline: Pipeline) -> None:
    execution = pipeline.start({})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    assert pipeline.job_runs(pipeline.verify_job) == []
    assert "StartVerifyJob" not in pipeline.states_entered(execution)
    assert pipeline.states_entered(execution)[-3:] == ["MarkFullLoadDone", "StartSuccessor", "HandedOver"]


@pytest.mark.parametrize("pipeline", [{"ReplicationTaskArns": "", "HasReplicationTasks": "false"}], indirect=True)
def test_a_stack_that_names_no_replication_task_fails_at_once_saying_what_to_deploy(pipeline: Pipeline) -> None:
    # GIVEN a first deploy that created the DMS target endpoint and names no task yet
    # WHEN the pipeline is started for its full load
    execution = pipeline.start({})
    # THEN it fails at once, before asking DMS or running a job, with the steps that make it work
    result = pipeline.wait_until_done(execution)
    assert (result["status"], result["error"]) == ("FAILED", "NoReplicationTask")
    assert "deploy again with ReplicationTaskArns=<its ARN>" in result["cause"]
    assert "DescribeReplicationTasks" not in pipeline.states_entered(execution)
    assert pipeline.job_runs(pipeline.full_load_job) == []
    # AND a pipeline whose full load is in silver still runs its CDC loop without one
    later = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(later, "WaitForFiles")


def test_full_load_skipped_when_the_input_says_it_ran(pipeline: Pipeline) -> None:
    execution = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(execution, "WaitForFiles")
    entered = pipeline.states_entered(execution)
    assert "DescribeReplicationTasks" not in entered
    assert pipeline.job_runs(pipeline.full_load_job) == []
    assert pipeline.job_runs(pipeline.cdc_job) == []


def test_stopped_replication_task_alerts_and_fails(pipeline: Pipeline) -> None:
    pipeline.dms.stop_replication_task(ReplicationTaskArn=pipeline.task_arn)
    execution = pipeline.start({})
    result = pipeline.wait_until_done(execution)
    assert result["status"] == "FAILED"
    assert result["error"] == "ReplicationTaskNotRunning"
    assert "stopped or failed" in result["cause"]
    [alert] = pipeline.alerts()
    assert alert["Subject"] == "cdclake: the DMS replication task is not running"
    assert '"Status":"stopped"' in alert["Message"]
    assert pipeline.job_runs(pipeline.full_load_job) == []


def test_a_replication_task_that_was_never_started_alerts_instead_of_waiting_forever(pipeline: Pipeline) -> None:
    # GIVEN a DMS task created but never started: status "ready", no ReplicationTaskStats
    pipeline.gaps.never_started.add(pipeline.task_arn)
    # WHEN the pipeline starts
    execution = pipeline.start({})
    result = pipeline.wait_until_done(execution)
    # THEN it stops at once with an alert that says the task never started, instead of polling forever
    assert result["status"] == "FAILED"
    assert result["error"] == "ReplicationTaskNotRunning"
    assert pipeline.states_entered(execution).count("DescribeReplicationTasks") == 1
    [alert] = pipeline.alerts()
    assert alert["Subject"] == "cdclake: the DMS replication task is not running"
    assert "never started" in alert["Message"] and '"Status":"ready"' in alert["Message"]
    assert pipeline.job_runs(pipeline.full_load_job) == []


# ------------------------------------------------------------------------------------------ the CDC loop
# The CDC job follows the queue itself: the fixture's fake_cdc_job consumes every message of a run, as the job does.


def test_queued_files_start_one_run_that_consumes_them(pipeline: Pipeline) -> None:
    # GIVEN four CDC files queued
    keys = [cdc_key("orders", "120000200"), cdc_key("orders", "120000100"), cdc_key("items", "120000300")]
    keys.append(cdc_key("orders", "120000400"))
    for key in keys:
        pipeline.send_file(key, 100)
    # WHEN the pipeline runs
    execution = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(execution, "WaitForFiles")
    # THEN CheckWork saw them and one CDC run started, by name only (its default arguments name the queue)
    first, after = work_checks(pipeline, execution)[:2]
    assert first == {"start": True, "reason": "files queued", "visible": 4, "inFlight": 0, "jobRunning": False,
                     "sweep": False}  # fmt: skip
    [scheduled] = [e["taskScheduledEventDetails"] for e in pipeline.history(execution) if e["type"] == "TaskScheduled"
                   and e["taskScheduledEventDetails"]["resource"] == "startJobRun.sync"]  # fmt: skip
    assert json.loads(scheduled["parameters"]) == {"JobName": pipeline.cdc_job}
    [run] = pipeline.job_runs(pipeline.cdc_job)
    assert (
        run["Arguments"] == {"--queue_url": pipeline.queue_url} and run["JobRunState"] == "SUCCEEDED"
    )  # CdcIdleSeconds
    # AND that run consumed every message, so the next check found no work and waited
    assert pipeline.cdc_runs == [keys]
    assert queue_counts(pipeline) == (0, 0)
    assert (after["start"], after["reason"]) == (False, "no work")
    entered = pipeline.states_entered(execution)
    assert entered[entered.index("CheckWork") :][:8] == [
        "CheckWork", "IsReloadDue", "IsGoldDue", "IsMaintenanceDue", "ShouldRunCdcJob", "RunCdcJob", "CdcRunDone",
        "NextIteration",
    ]  # fmt: skip
    assert pipeline.state_input(execution, "NextIteration")["silver"] == {"changed": True}


def test_no_run_starts_while_a_cdc_run_is_active(pipeline: Pipeline) -> None:
    # GIVEN a CDC run started by hand that is still RUNNING, and then two files queued
    pipeline.gaps.running_seconds[pipeline.cdc_job] = 60
    pipeline.glue.start_job_run(JobName=pipeline.cdc_job)
    pipeline.send_file(cdc_key("orders", "120000100"), 100)
    pipeline.send_file(cdc_key("orders", "120000200"), 100)
    # WHEN the pipeline runs its three iterations
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN every iteration waited PollSeconds instead of starting a second run, and the files stay queued
    checks = work_checks(pipeline, execution)
    assert [(c["start"], c["jobRunning"], c["visible"], c["reason"]) for c in checks] == [
        (False, True, 2, "a CDC job run is active")
    ] * 3
    entered = pipeline.states_entered(execution)
    assert "RunCdcJob" not in entered and entered.count("WaitForFiles") == 3
    assert len(pipeline.job_runs(pipeline.cdc_job)) == 1
    assert queue_counts(pipeline) == (2, 0)


@pytest.mark.parametrize("pipeline", [{"SweepEveryIterations": "2", "MaintenanceEveryHours": "0"}], indirect=True)
def test_an_idle_queue_starts_a_sweep_run_every_sweep_every_iterations(pipeline: Pipeline) -> None:
    # GIVEN an empty queue (a file whose S3 event never reached it would be found only by a run listing bronze)
    # WHEN the pipeline runs its three iterations
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN the first two iterations waited and the third, 2 iterations without a run, started a sweep run
    assert [payload["sinceSweep"] for _, payload in pipeline.gaps.lambda_calls] == [0, 1, 2]
    checks = work_checks(pipeline, execution)
    assert [(c["start"], c["sweep"], c["reason"]) for c in checks] == [
        (False, False, "no work"), (False, False, "no work"), (True, True, "sweep due"),
    ]  # fmt: skip
    assert len(pipeline.job_runs(pipeline.cdc_job)) == 1 and pipeline.cdc_runs == [[]]
    # AND the sweep run was started without an idle wait (nothing is queued: it lists bronze once and ends)
    [run] = pipeline.job_runs(pipeline.cdc_job)
    assert run["Arguments"] == {"--queue_url": pipeline.queue_url, "--idle_seconds": "0"}
    entered = pipeline.states_entered(execution)
    assert "RunCdcSweep" in entered and "RunCdcJob" not in entered
    # AND the count restarted with the run and goes on in the successor: 1 iteration (the run's) since the sweep
    assert pipeline.input_of(pipeline.successor_of(execution))["sinceSweep"] == 1


def test_a_failed_run_is_retried_then_alerts_and_the_loop_goes_on(pipeline: Pipeline) -> None:
    # GIVEN a queued file and a CDC job whose next 4 runs fail (Retry intervals recorded instead of waited)
    pipeline.gaps.retry_waits = []
    pipeline.cdc_failures_left = 4
    key = cdc_key("orders", "120000100")
    pipeline.send_file(key, 100)
    # WHEN the pipeline runs its three iterations
    execution = pipeline.start({"fullLoadDone": True})
    result = pipeline.wait_until_done(execution)
    # THEN the execution did not fail: the run was tried 4 times (3 retries, 60 s, 120 s, 240 s apart), alerted,
    # and the next iteration started a new run that applied the file
    assert result["status"] == "SUCCEEDED"
    runs = sorted(pipeline.job_runs(pipeline.cdc_job), key=lambda r: r["StartedOn"])
    assert [r["JobRunState"] for r in runs] == ["FAILED"] * 4 + ["SUCCEEDED"]
    assert pipeline.gaps.retry_waits == [60, 120, 240]
    failed = [e for e in pipeline.history(execution) if e["type"] == "TaskFailed"]
    assert len(failed) == 4 and all("simulated failure of cdclake-cdc" in e["taskFailedEventDetails"]["cause"]
                                    for e in failed)  # fmt: skip
    [alert] = pipeline.alerts()
    assert alert["Subject"] == "cdclake: a CDC run failed"
    assert "States.TaskFailed" in alert["Message"] and "simulated failure of cdclake-cdc" in alert["Message"]
    assert "the next loop iteration starts a new run" in alert["Message"]
    entered = pipeline.states_entered(execution)
    assert entered.count("RunCdcJob") == 2 and entered.count("NotifyCdcRunFailed") == 1
    assert entered.index("NotifyCdcRunFailed") < entered.index("CdcRunDone") < entered.index("NextIteration")
    assert "NotifyFailure" not in entered and entered[-2:] == ["StartSuccessor", "HandedOver"]
    assert pipeline.cdc_runs == [[key]] and queue_counts(pipeline) == (0, 0)
    # AND the events it counted (2 runs with every retry counted) cover its real history
    assert assert_counter_covers_history(pipeline, execution) == 30 + 3 * 54 + 2 * 52


def test_empty_queue_waits_and_polls_again(pipeline: Pipeline) -> None:
    execution = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(execution, "CheckWork", times=2)
    entered = pipeline.states_entered(execution)
    assert entered.index("WaitForFiles") < len(entered) - entered[::-1].index("CheckWork") - 1
    assert "RunCdcJob" not in entered
    assert [name for name, _ in pipeline.gaps.lambda_calls] == ["cdclake-work_check"] * len(pipeline.gaps.lambda_calls)


def test_loop_threshold_hands_over_to_a_new_execution(pipeline: Pipeline) -> None:
    # MaxIterations is 3 in the fixture: after 3 loop iterations the execution starts its successor.
    execution = pipeline.start({"fullLoadDone": True, "generation": 4, "sinceSweep": 7})
    result = pipeline.wait_until_done(execution)
    assert result["status"] == "SUCCEEDED"
    assert pipeline.states_entered(execution).count("CheckWork") == 3
    executions = pipeline.sfn.list_executions(stateMachineArn=pipeline.state_machine_arn)["executions"]
    successors = [e for e in executions if e["executionArn"] != execution]
    assert len(successors) == 1
    successor_input = json.loads(pipeline.sfn.describe_execution(executionArn=successors[0]["executionArn"])["input"])
    assert successor_input["fullLoadDone"] is True
    assert successor_input["generation"] == 5
    assert successor_input["predecessor"] == execution
    assert successor_input["sinceSweep"] == 10  # 7 + 3 iterations without a run
    # The successor skips the full load and goes straight to the loop.
    pipeline.wait_for_state(successors[0]["executionArn"], "CheckWork")
    assert "DescribeReplicationTasks" not in pipeline.states_entered(successors[0]["executionArn"])


def test_a_second_execution_is_refused(pipeline: Pipeline) -> None:
    first = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(first, "CheckWork")
    second = pipeline.start({"fullLoadDone": True})
    result = pipeline.wait_until_done(second)
    assert result["status"] == "FAILED"
    assert result["error"] == "AnotherExecutionRunning"
    assert pipeline.sfn.describe_execution(executionArn=first)["status"] == "RUNNING"


# ---------------------------------------------------------------------------------- table maintenance
# Maintenance is due MaintenanceEveryHours (1 in the fixture) after it last ran, once a CDC run ran since; a test
# makes it due by handing in an old maintenance.last. The fixture hands over after 3 iterations.


def job_runs_in_order(pipeline: Pipeline) -> list[str]:
    """The Glue jobs that ran, in order, by role ("cdc", "maintenance", "gold", ...) - after proving that each run
    ended before the next one started."""
    timeline = list(pipeline.gaps.glue_timeline)
    if len(timeline) % 2:  # a run still under way (a successor goes on while the test reads): not yet in order
        timeline.pop()
    starts, ends = timeline[0::2], timeline[1::2]
    assert [event for event, _, _ in starts] == ["start"] * len(starts), timeline
    assert [event for event, _, _ in ends] == ["end"] * len(ends), timeline
    # start A, end A, start B, end B ...: every run ended before the next started, so none overlapped.
    assert [(job, run) for _, job, run in starts] == [(job, run) for _, job, run in ends], timeline
    roles = {pipeline.full_load_job: "full-load", pipeline.cdc_job: "cdc", pipeline.maintenance_job: "maintenance",
             pipeline.gold_job: "gold", pipeline.verify_job: "verify"}  # fmt: skip
    return [roles[job] for _, job, _ in starts]


def three_iterations_with_a_cdc_run_each(pipeline: Pipeline, execution_input: dict[str, Any] | None = None) -> str:
    """Seven CDC files queued (with a sweep due after every iteration, a CDC run in each), then one execution
    run to its end: its 3 iterations and the hand-over. The execution's ARN, once it SUCCEEDED."""
    for stamp in range(7):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    execution = pipeline.start({"fullLoadDone": True, **(execution_input or {})})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    return execution


def three_iterations_with_a_failing_job(
    pipeline: Pipeline, job: str, execution_input: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """``job`` failing every run and four CDC files queued, then one execution run to its end (3 iterations and
    the hand-over, or a stop): its ARN and how it ended."""
    pipeline.gaps.failing_jobs.add(job)
    for stamp in range(4):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    execution = pipeline.start({"fullLoadDone": True, **(execution_input or {})})
    return execution, pipeline.wait_until_done(execution)


@pytest.mark.parametrize("pipeline", [{"SweepEveryIterations": "1"}], indirect=True)
def test_maintenance_runs_when_its_hours_are_up_once_a_cdc_run_changed_silver(pipeline: Pipeline) -> None:
    # GIVEN maintenance last run long ago, no CDC run since, and a CDC run in every iteration (a sweep due each time)
    # WHEN one execution runs its 3 iterations and hands over
    execution = three_iterations_with_a_cdc_run_each(pipeline, {"maintenance": {"last": LONG_AGO, "changed": False}})
    # THEN the clock said due, but maintenance waited for the first CDC run, ran once at the start of the next
    # iteration (before its CDC run, in the serial lane), and then not again: its hour started anew
    assert [m["due"] for m in work_checks(pipeline, execution, lane="maintenance")] == [True, True, False]
    assert job_runs_in_order(pipeline) == ["cdc", "maintenance", "cdc", "cdc"]
    entered = pipeline.states_entered(execution)
    assert entered.count("RunMaintenanceJob") == 1
    assert entered.index("CdcRunDone") < entered.index("RunMaintenanceJob") < entered.index("MaintenanceDone")
    assert queue_counts(pipeline) == (0, 0)
    # AND the successor is handed when it ran, and that silver changed since (the two runs after it)
    successor = pipeline.successor_of(execution)
    handed_over = pipeline.input_of(successor)["maintenance"]
    ran = pipeline.state_input(execution, "ShouldRunCdcJob")["maintenance"]["last"]
    assert handed_over == {"last": ran, "changed": True} and ran > LONG_AGO
    # AND so the successor's clock says maintenance is an hour away
    pipeline.wait_for_state(successor, "IsGoldDue")
    assert pipeline.state_input(successor, "IsGoldDue")["work"]["maintenance"]["due"] is False


def test_a_quiet_source_starts_no_maintenance(pipeline: Pipeline) -> None:
    # GIVEN maintenance long overdue by the clock, and an empty queue
    execution = pipeline.start({"fullLoadDone": True, "maintenance": {"last": LONG_AGO, "changed": False}})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN no CDC run changed silver, so no maintenance job ran in the 3 iterations
    assert [m["due"] for m in work_checks(pipeline, execution, lane="maintenance")] == [True] * 3
    assert "RunMaintenanceJob" not in pipeline.states_entered(execution)
    assert pipeline.gaps.glue_timeline == []


def test_failed_maintenance_alerts_and_the_pipeline_keeps_applying_cdc(pipeline: Pipeline) -> None:
    # GIVEN a maintenance job that fails, maintenance due and silver changed, and queued files
    # WHEN the execution runs its 3 iterations
    due = {"maintenance": {"last": LONG_AGO, "changed": True}}
    execution, result = three_iterations_with_a_failing_job(pipeline, pipeline.maintenance_job, due)
    # THEN it did not stop: it alerted once, went on to the CDC run and handed over as usual
    assert result["status"] == "SUCCEEDED"
    [alert] = pipeline.alerts()
    assert alert["Subject"] == "cdclake: table maintenance failed"
    assert "simulated failure of cdclake-maintenance" in alert["Message"]
    assert "tried again MaintenanceEveryHours from now" in alert["Message"]
    entered = pipeline.states_entered(execution)
    assert entered.count("RunMaintenanceJob") == 1  # its time was recorded: not tried again at once
    assert entered.index("NotifyMaintenanceFailed") < entered.index("RunCdcJob")
    assert "NotifyFailure" not in entered
    assert job_runs_in_order(pipeline) == ["maintenance", "cdc"]
    assert queue_counts(pipeline) == (0, 0)


@pytest.mark.parametrize("pipeline", [{"MaintenanceEveryHours": "0"}], indirect=True)
def test_maintenance_every_zero_hours_never_runs_it(pipeline: Pipeline) -> None:
    execution = pipeline.start({"fullLoadDone": True, "maintenance": {"last": LONG_AGO, "changed": True}})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    assert pipeline.states_entered(execution).count("CheckWork") == 3
    assert "RunMaintenanceJob" not in pipeline.states_entered(execution)
    assert pipeline.gaps.glue_timeline == []


@pytest.mark.parametrize("lane", ["verify", "reload"])
@pytest.mark.parametrize("pipeline", [{"MaxIterations": "8"}], indirect=True)
def test_maintenance_never_starts_beside_a_reload_or_a_verify_run(pipeline: Pipeline, lane: str) -> None:
    # GIVEN maintenance due and silver changed, and a verify run that keeps running (started after a reload, or on
    # its schedule), or a reload the CDC job asked for, whose full-load run keeps running
    if lane == "verify":
        job = pipeline.verify_job
        pipeline.gaps.running_seconds[job] = 600
        pipeline.glue.start_job_run(JobName=job)
    else:
        job = pipeline.full_load_job
        pipeline.gaps.running_seconds[job] = 600
        _request_reload(pipeline, "public.items")
    # WHEN the pipeline goes three iterations with it running
    execution = pipeline.start({"fullLoadDone": True, "maintenance": {"last": LONG_AGO, "changed": True}})
    pipeline.wait_for_state(execution, "CheckWork", times=4)
    # THEN no maintenance job started: each check said another lane is running
    assert "RunMaintenanceJob" not in pipeline.states_entered(execution)
    busy = [(lane["busy"], lane["reason"]) for lane in work_checks(pipeline, execution, lane="lanes")[:3]]
    if lane == "verify":
        assert busy == [(True, "a verify run is active")] * 3
    else:  # the first check started the reload
        assert busy == [(True, "a reload starts now")] + [(True, "a full-load run is active")] * 2
    # WHEN that run ends
    del pipeline.gaps.running_seconds[job]
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN maintenance ran once, after the other lane's run had ended
    assert pipeline.states_entered(execution).count("RunMaintenanceJob") == 1
    timeline = pipeline.gaps.glue_timeline
    [other_end] = [i for i, (event, name, _) in enumerate(timeline) if event == "end" and name == job]
    [maintenance_start] = [
        i for i, (ev, name, _) in enumerate(timeline) if ev == "start" and name == pipeline.maintenance_job
    ]
    assert other_end < maintenance_start


# ---------------------------------------------------------------------------------------- gold marts
# GoldEveryIterations is 0 in the fixture; these tests turn it on. Maintenance still runs every 2 iterations.


@pytest.mark.parametrize("pipeline", [{"GoldEveryIterations": "2", "SweepEveryIterations": "1"}], indirect=True)
def test_gold_runs_every_second_iteration_between_cdc_runs_and_before_maintenance(pipeline: Pipeline) -> None:
    # GIVEN queued CDC files, a sweep due after every iteration without a run (a CDC run in every iteration), gold
    # due (2 iterations since it, silver changed) and maintenance due (long ago, silver changed)
    # WHEN one execution runs its 3 iterations and hands over
    due = {"sinceGold": 2, "maintenance": {"last": LONG_AGO, "changed": True}}
    execution = three_iterations_with_a_cdc_run_each(pipeline, due)
    # THEN the gold job ran in the first and the third iteration, before their CDC runs, in the serial lane:
    # no two Glue jobs overlapped, gold before maintenance (it reads silver before files are rewritten)
    assert job_runs_in_order(pipeline) == ["gold", "maintenance", "cdc", "cdc", "gold", "cdc"]
    entered = pipeline.states_entered(execution)
    done = [i for i, name in enumerate(entered) if name == "CdcRunDone"]
    gold = [i for i, name in enumerate(entered) if name == "RunGoldJob"]
    assert gold[0] < entered.index("RunMaintenanceJob") < done[0] < done[1] < gold[1] < done[2]
    assert "NotifyGoldFailed" not in entered
    assert [run["JobRunState"] for run in pipeline.job_runs(pipeline.gold_job)] == ["SUCCEEDED"] * 2
    # AND the successor carries the count on: one iteration since gold, and silver changed (the third run)
    successor = pipeline.successor_of(execution)
    handed_over = pipeline.input_of(successor)
    assert (handed_over["sinceGold"], handed_over["silver"]) == (1, {"changed": True})


@pytest.mark.parametrize(
    "pipeline", [{"GoldEveryIterations": "1", "MaintenanceEveryHours": "0", "MaxIterations": "4"}], indirect=True
)
def test_gold_waits_for_a_cdc_run_when_silver_did_not_change(pipeline: Pipeline) -> None:
    # GIVEN gold due every iteration, and an execution handed over with no CDC run since the last gold run
    execution = pipeline.start({"fullLoadDone": True, "sinceGold": 5, "silver": {"changed": False}})
    # WHEN its first two iterations find the queue empty
    pipeline.wait_for_state(execution, "WaitForFiles", times=2)
    assert "RunGoldJob" not in pipeline.states_entered(execution)
    # AND then a file arrives
    pipeline.send_file(cdc_key("orders", "120000000"), 100)
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN gold ran once, in the iteration after the run that file started, and not after the empty polls
    assert job_runs_in_order(pipeline) == ["cdc", "gold"]
    entered = pipeline.states_entered(execution)
    assert entered.index("RunCdcJob") < entered.index("RunGoldJob")
    assert pipeline.state_input(execution, "StartSuccessor")["silver"] == {"changed": False}


@pytest.mark.parametrize("pipeline", [{"GoldEveryIterations": "1", "MaintenanceEveryHours": "0"}], indirect=True)
def test_a_fresh_start_refreshes_the_marts_once_without_waiting_for_cdc(pipeline: Pipeline) -> None:
    # GIVEN an execution started by hand (no hand-over input) and an empty queue
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN gold ran once, in the first iteration (the marts may lag silver after a stop or a redeploy), then not again
    assert pipeline.states_entered(execution).count("CheckWork") == 3
    assert job_runs_in_order(pipeline) == ["gold"]


@pytest.mark.parametrize("pipeline", [{"SweepEveryIterations": "1"}], indirect=True)
def test_gold_every_zero_iterations_never_runs_it(pipeline: Pipeline) -> None:
    # GIVEN the fixture's GoldEveryIterations 0, a CDC run in every iteration and maintenance due
    execution = three_iterations_with_a_cdc_run_each(pipeline, {"maintenance": {"last": LONG_AGO, "changed": True}})
    # THEN every run happened, maintenance ran, and gold never did
    assert "RunGoldJob" not in pipeline.states_entered(execution)
    assert job_runs_in_order(pipeline) == ["maintenance", "cdc", "cdc", "cdc"]
    assert pipeline.job_runs(pipeline.gold_job) == []


@pytest.mark.parametrize(
    "pipeline",
    [{"GoldEveryIterations": "1", "MaintenanceEveryHours": "0", "SweepEveryIterations": "2", "MaxIterations": "4"}],
    indirect=True,
)
def test_failed_gold_alerts_and_the_pipeline_keeps_applying_cdc(pipeline: Pipeline) -> None:
    # GIVEN a gold job that fails (a broken mart), queued files (a run in the first iteration), gold and an empty
    # poll in the second, a sweep run in the third, gold in the fourth
    # WHEN the execution runs its 4 iterations
    execution, result = three_iterations_with_a_failing_job(pipeline, pipeline.gold_job)
    # THEN it did not stop: each failure was caught and alerted, and it handed over as usual
    assert result["status"] == "SUCCEEDED"
    alerts = pipeline.alerts()
    assert [a["Subject"] for a in alerts] == ["cdclake: gold mart refresh failed"] * 2
    assert all("simulated failure of cdclake-gold" in a["Message"] for a in alerts)
    entered = pipeline.states_entered(execution)
    assert "NotifyFailure" not in entered and "NotifyCdcRunFailed" not in entered
    assert entered.count("NotifyGoldFailed") == 2 and entered[-2:] == ["StartSuccessor", "HandedOver"]
    # gold after each run, not after the empty poll (silver.changed was cleared by the failed gold run too)
    assert job_runs_in_order(pipeline) == ["cdc", "gold"] * 2
    assert [r["JobRunState"] for r in pipeline.job_runs(pipeline.gold_job)] == ["FAILED", "FAILED"]
    assert queue_counts(pipeline) == (0, 0)


# ------------------------------------------------------------------------------ history and duration limits


def assert_counter_covers_history(pipeline: Pipeline, execution: str) -> int:
    """The events the execution counted when it handed over cover its whole real history (moto's)."""
    counted = pipeline.state_input(execution, "StartSuccessor")["spent"]["events"]
    assert len(pipeline.history(execution)) <= counted
    return int(counted)


@pytest.mark.parametrize("pipeline", [{"MaxHistoryEvents": "100"}], indirect=True)
def test_a_long_full_load_hands_over_from_the_wait_loop(pipeline: Pipeline) -> None:
    # GIVEN a full load that stays at 40 % and a budget of 100 history events
    pipeline.gaps.full_load_percent[pipeline.task_arn] = 40
    execution = pipeline.start({"generation": 2})
    # THEN the execution hands over from the wait loop once it has spent the budget, without the full-load job
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    entered = pipeline.states_entered(execution)
    assert entered[-3:] == ["IsFullLoadWaitNearLimit", "StartSuccessor", "HandedOver"]
    assert entered.count("DescribeReplicationTasks") == 3  # 30 + 3 polls of 26 events reach 100
    assert assert_counter_covers_history(pipeline, execution) == 30 + 3 * 26
    assert pipeline.job_runs(pipeline.full_load_job) == []
    # AND the successor keeps waiting for the full load (it asks DMS again)
    successor = pipeline.successor_of(execution)
    assert pipeline.input_of(successor) == {
        "fullLoadDone": False, "generation": 3, "predecessor": execution,
        "maintenance": {"last": "", "changed": False}, "sinceGold": 0, "sinceSweep": 0, "silver": {"changed": True},
        "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID": execution,
    }  # fmt: skip
    pipeline.wait_for_state(successor, "DescribeReplicationTasks")


@pytest.mark.parametrize("pipeline", [{"MaxHistoryEvents": "180", "MaxIterations": "50"}], indirect=True)
def test_the_cdc_loop_hands_over_on_the_events_it_spent_with_its_counters(pipeline: Pipeline) -> None:
    # GIVEN queued files, maintenance due once silver changes, and counters carried in from a predecessor
    for stamp in range(5):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    due = {"last": LONG_AGO, "changed": False}
    execution = pipeline.start({"fullLoadDone": True, "sinceGold": 3, "sinceSweep": 7, "maintenance": due})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN it handed over after 2 iterations, not after 50: 30 + a run 52 + 2 iterations x 54 + maintenance 40
    # = 230 >= 180 (after the first iteration 136 < 180), and the events it counted cover its real history
    entered = pipeline.states_entered(execution)
    assert entered.count("CheckWork") == 2
    assert entered.count("RunCdcJob") == 1 and entered.count("RunMaintenanceJob") == 1
    assert assert_counter_covers_history(pipeline, execution) == 230
    # AND the successor goes on with every counter: maintenance just ran, gold 3 + 2 iterations ago (never due:
    # GoldEveryIterations 0), the sweep count restarted by the run (1 iteration since it, and the idle one)
    successor = pipeline.successor_of(execution)
    handed_over = pipeline.input_of(successor)
    assert (handed_over["maintenance"]["changed"], handed_over["sinceGold"], handed_over["sinceSweep"]) == (False, 5, 2)
    assert handed_over["maintenance"]["last"] > LONG_AGO
    assert handed_over["silver"] == {"changed": True}
    pipeline.wait_for_state(successor, "CheckWork")
    assert pipeline.state_input(successor, "CheckWork")["sinceSweep"] == 2


@pytest.mark.parametrize(
    "pipeline", [{"MaxHistoryEvents": "200", "MaxIterations": "50", "GoldEveryIterations": "1"}], indirect=True
)
def test_gold_runs_are_counted_in_the_history_budget(pipeline: Pipeline) -> None:
    # GIVEN a failing gold job run after the CDC run (the longest gold path: job, alert, Pass), queued files, and
    # maintenance due once silver changes
    pipeline.gaps.failing_jobs.add(pipeline.gold_job)
    for stamp in range(5):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    execution = pipeline.start({"fullLoadDone": True, "maintenance": {"last": LONG_AGO, "changed": False}})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN 30 + a run 52 + 2 iterations x 54 + gold 40 + maintenance 40 = 270 >= 200: it handed over after
    # 2 iterations (136 after the first), and the events it counted cover its real history
    entered = pipeline.states_entered(execution)
    assert entered.count("CheckWork") == 2
    assert entered.count("RunGoldJob") == 1 and entered.count("NotifyGoldFailed") == 1
    assert entered.count("RunMaintenanceJob") == 1
    assert assert_counter_covers_history(pipeline, execution) == 270


@pytest.mark.parametrize(
    ("started", "hand_over_at"),
    [
        (datetime.datetime(2020, 1, 1, 0, 0, 0, tzinfo=datetime.UTC), "2020-12-01T00:00:00Z"),
        (datetime.datetime(2020, 6, 30, 23, 59, 59, tzinfo=datetime.UTC), "2020-12-01T00:00:00Z"),
        (datetime.datetime(2020, 7, 1, 0, 0, 0, tzinfo=datetime.UTC), "2021-06-01T00:00:00Z"),
        (datetime.datetime(2020, 12, 31, 23, 59, 59, tzinfo=datetime.UTC), "2021-06-01T00:00:00Z"),
    ],
)
def test_an_execution_hands_over_months_before_the_one_year_limit(
    pipeline: Pipeline, started: datetime.datetime, hand_over_at: str
) -> None:
    # GIVEN an execution that started long ago (its hand-over time has passed)
    pipeline.gaps.execution_start_time = started
    execution = pipeline.start({"fullLoadDone": True})
    # THEN its hand-over time is 5 to 11 months after its start
    pipeline.wait_for_state(execution, "ListRunningExecutions")
    at = pipeline.state_input(execution, "ListRunningExecutions")["handOver"]["at"]
    assert at == hand_over_at
    months = (int(at[:4]) - started.year) * 12 + int(at[5:7]) - started.month
    assert 5 <= months <= 11
    # AND it hands over after its first iteration, well below MaxIterations
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    assert pipeline.states_entered(execution).count("CheckWork") == 1
    assert pipeline.states_entered(execution)[-2:] == ["StartSuccessor", "HandedOver"]


# ------------------------------------------------------------------------------- the successor's start


def test_a_successor_start_delivered_twice_starts_one_successor(pipeline: Pipeline) -> None:
    # GIVEN a hand-over whose StartExecution reaches Step Functions but whose answer is lost (SdkClientException):
    # the state's Retry delivers the start a second time
    pipeline.gaps.lose_first_start_response = True
    execution = pipeline.start({"fullLoadDone": True, "generation": 4})
    # WHEN the execution hands over
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN exactly one successor runs, named after its predecessor and generation, and it runs the CDC loop
    assert pipeline.gaps.successor_starts == 2
    assert pipeline.gaps.retry_waits == [5]  # StartSuccessor's Retry, once
    executions = pipeline.sfn.list_executions(stateMachineArn=pipeline.state_machine_arn)["executions"]
    successors = [e for e in executions if e["executionArn"] != execution]
    assert len(successors) == 1, successors
    assert successors[0]["name"].startswith("g5-")
    pipeline.wait_for_state(successors[0]["executionArn"], "CheckWork")
    assert "WaitForPredecessor" not in pipeline.states_entered(successors[0]["executionArn"])[:3]
    assert pipeline.alerts() == []


def test_a_successor_start_repeated_after_the_successor_ended_is_a_hand_over_not_a_failure(
    pipeline: Pipeline,
) -> None:
    # GIVEN the successor a hand-over will start already exists and has ended (ExecutionAlreadyExists)
    pipeline.gaps.lose_first_start_response = True
    pipeline.gaps.successor_ended_before_retry = True
    execution = pipeline.start({"fullLoadDone": True, "generation": 1})
    # THEN the predecessor still ends as handed over, without an alert
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    assert pipeline.states_entered(execution)[-2:] == ["StartSuccessor", "HandedOver"]
    assert pipeline.gaps.retry_waits == [5]  # StartSuccessor's Retry, once
    assert pipeline.alerts() == []


def _request_reload(pipeline: Pipeline, *tables: str) -> None:
    """The CDC job's reload request, as it writes it (cdclake.ops.reload_requests)."""
    request = {"tables": list(tables), "reasons": {t: "a reload: LOAD files written again" for t in tables},
               "updated": "2024-03-01T12:00:00Z"}  # fmt: skip
    pipeline.s3.put_object(Bucket=pipeline.artifacts_bucket, Key="state/reloads.json", Body=json.dumps(request))


def test_a_reload_the_cdc_job_asked_for_runs_in_the_full_load_job_beside_the_cdc_loop(pipeline: Pipeline) -> None:
    # GIVEN the CDC job's request to reload s.items, and a CDC file queued for another table
    _request_reload(pipeline, "public.items")
    pipeline.send_file(cdc_key("orders", "120000100"), 100)
    # WHEN the pipeline runs its three iterations
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN the first iteration started the full-load job for exactly that table, without waiting for it, and
    # the CDC run of the same iteration applied the other table's file
    [reload] = pipeline.job_runs(pipeline.full_load_job)
    assert reload["Arguments"] == {"--tables": "public.items"}
    entered = pipeline.states_entered(execution)
    first = entered[entered.index("CheckWork") :]
    assert first[:7] == [
        "CheckWork", "IsReloadDue", "StartReloadJob", "IsGoldDue", "IsMaintenanceDue", "ShouldRunCdcJob", "RunCdcJob",
    ]  # fmt: skip
    assert pipeline.cdc_runs == [[cdc_key("orders", "120000100")]]
    # AND the later checks saw the run succeed since the request and started no other
    answers = work_checks(pipeline, execution, lane="reload")
    assert [(a["start"], a["tables"]) for a in answers] == [(True, "public.items")] + [(False, "public.items")] * 2
    assert answers[1]["reason"] == "loaded since the request (the CDC job clears it)"
    assert entered.count("StartReloadJob") == 1 and "NotifyReloadFailing" not in entered
    assert pipeline.alerts() == []


@pytest.mark.parametrize("pipeline", [{"MaxIterations": "5"}], indirect=True)
def test_a_reload_that_keeps_failing_is_tried_three_times_then_alerted_once(pipeline: Pipeline) -> None:
    # GIVEN a reload request and a full-load job whose runs fail (a timeout, say)
    _request_reload(pipeline, "public.items")
    pipeline.gaps.failing_jobs.add(pipeline.full_load_job)
    # WHEN the pipeline runs five iterations
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN the job ran three times for the request, then the loop gave up and alerted once, naming the table
    runs = pipeline.job_runs(pipeline.full_load_job)
    assert [r["JobRunState"] for r in runs] == ["FAILED"] * 3
    answers = work_checks(pipeline, execution, lane="reload")
    assert [(a["start"], a["alert"], a["failures"]) for a in answers] == [
        (True, False, 0), (True, False, 1), (True, False, 2), (False, True, 3), (False, False, 3),
    ]  # fmt: skip
    [alert] = pipeline.alerts()
    assert alert["Subject"] == "cdclake: a table reload keeps failing"
    assert "failed 3 times loading public.items" in alert["Message"]
    assert "public.items: a reload: LOAD files written again" in alert["Message"]
    # AND the execution went on with the CDC loop all along (nothing failed)
    entered = pipeline.states_entered(execution)
    assert entered.count("StartReloadJob") == 3 and entered.count("NotifyReloadFailing") == 1
    assert "NotifyFailure" not in entered


def test_a_cdc_run_that_held_a_failing_table_succeeds_and_the_sweep_after_its_maximum_run_time_proceeds(
    pipeline: Pipeline,
) -> None:
    # GIVEN a queued file, and CDC runs that end at CdcMaxRunSeconds (3600 s) SUCCEEDED: a table that kept failing
    # through the run is held, not a failed run (glue/jobs/cdc.py held_tables; tests/aws/test_follow_queue.py)
    pipeline.gaps.job_execution_seconds[pipeline.cdc_job] = 3600
    pipeline.send_file(cdc_key("orders", "120000100"), 100)
    # WHEN the pipeline runs its three iterations
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN no run was retried or alerted, and the check after each run started a sweep at once (the run may have
    # left files it had taken off the queue): the held table never holds the sweep back
    runs = pipeline.job_runs(pipeline.cdc_job)
    assert [r["JobRunState"] for r in runs] == ["SUCCEEDED"] * 3
    checks = work_checks(pipeline, execution)
    assert [(c["start"], c["sweep"], c["reason"]) for c in checks] == [
        (True, False, "files queued"),
        (True, True, "sweep: the last CDC run stopped at its maximum run time (it may have left files)"),
        (True, True, "sweep: the last CDC run stopped at its maximum run time (it may have left files)"),
    ]
    entered = pipeline.states_entered(execution)
    assert entered.count("RunCdcSweep") == 2 and "NotifyCdcRunFailed" not in entered
    assert pipeline.alerts() == []


def test_a_reload_asked_for_by_a_cdc_run_starts_right_after_that_run_before_maintenance(pipeline: Pipeline) -> None:
    # GIVEN maintenance due by the clock, and a CDC run that asks for a reload of public.items and so ends early (the
    # CDC job ends its run after the round that wrote a new table to its reload request: glue/jobs/cdc.py
    # reload_asked; tests/aws/test_follow_queue.py)
    fake_job = pipeline.gaps.glue_runner
    assert fake_job is not None

    def asking_cdc_job(job_name: str, arguments: dict[str, str]) -> None:
        fake_job(job_name, arguments)
        if job_name == pipeline.cdc_job and not pipeline.job_runs(pipeline.full_load_job):
            _request_reload(pipeline, "public.items")

    pipeline.gaps.glue_runner = asking_cdc_job
    pipeline.send_file(cdc_key("orders", "120000100"), 100)
    execution = pipeline.start({"fullLoadDone": True, "maintenance": {"last": LONG_AGO, "changed": False}})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN the check right after that run started the full-load job for the table, before any other job
    entered = pipeline.states_entered(execution)
    after_run = entered[entered.index("CdcRunDone") :]
    assert after_run[: after_run.index("StartReloadJob") + 1] == [
        "CdcRunDone", "NextIteration", "IsHistoryNearLimit", "CheckWork", "IsReloadDue", "StartReloadJob",
    ]  # fmt: skip
    assert [event[:2] for event in pipeline.gaps.glue_timeline[:3]] == [
        ("start", pipeline.cdc_job), ("end", pipeline.cdc_job), ("start", pipeline.full_load_job),
    ]  # fmt: skip
    # AND maintenance, due once that run changed silver, did not start beside the reload
    lanes = work_checks(pipeline, execution, lane="lanes")
    assert [lane["reason"] for lane in lanes[1:]] == ["a reload starts now", "no other lane is running"]
    assert entered.count("RunMaintenanceJob") == 1
    assert entered.index("RunMaintenanceJob") > entered.index("CheckWork", entered.index("StartReloadJob") + 1)

"""The state machine definition executed by moto's Step Functions interpreter, scenario by scenario.

The definition file is used as deployed (placeholders filled as CloudFormation would); moto's gaps are
patched in the `moto_step_functions_gaps` fixture (conftest.py), and our Lambda handlers run in-process.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import pytest
from conftest import RECEIVE_VISIBILITY_SECONDS, Pipeline


def cdc_key(table: str, stamp: str) -> str:
    return f"dms/sales/{table}/20240301-{stamp}.csv"


def manifest_of(pipeline: Pipeline, run: dict[str, Any]) -> dict[str, Any]:
    bucket, _, key = run["Arguments"]["--manifest"][len("s3://") :].partition("/")
    return dict(json.loads(pipeline.s3.get_object(Bucket=bucket, Key=key)["Body"].read()))


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
    assert "ReadQueueDepth" not in pipeline.states_entered(execution)
    # The successor starts with the whole history budget, knows the full load ran, and polls the empty queue.
    successor = pipeline.successor_of(execution)
    assert pipeline.input_of(successor)["fullLoadDone"] is True
    pipeline.wait_for_state(successor, "WaitForFiles", times=2)
    assert "DescribeReplicationTasks" not in pipeline.states_entered(successor)
    assert len(pipeline.job_runs(pipeline.full_load_job)) == 1
    assert pipeline.job_runs(pipeline.cdc_job) == []


def test_full_load_skipped_when_the_input_says_it_ran(pipeline: Pipeline) -> None:
    execution = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(execution, "WaitForFiles")
    entered = pipeline.states_entered(execution)
    assert "DescribeReplicationTasks" not in entered
    assert pipeline.job_runs(pipeline.full_load_job) == []


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


def test_queued_files_run_the_cdc_job_with_their_manifest_then_are_deleted(pipeline: Pipeline) -> None:
    # GIVEN four CDC files queued (the batch limit is 3 files) - the last one arrives first for its table
    keys = [cdc_key("orders", "120000200"), cdc_key("orders", "120000100"), cdc_key("items", "120000300")]
    for key in keys:
        pipeline.send_file(key, 100)
    pipeline.send_file(cdc_key("orders", "120000400"), 100)
    # WHEN the pipeline runs
    execution = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(execution, "WaitForFiles")
    # THEN two CDC job runs applied the files: 3 then 1, each with its manifest, in key order
    runs = sorted(pipeline.job_runs(pipeline.cdc_job), key=lambda r: r["StartedOn"])
    assert len(runs) == 2
    manifests = []
    for run in runs:
        uri = run["Arguments"]["--manifest"]
        bucket, _, key = uri[len("s3://") :].partition("/")
        manifests.append(json.loads(pipeline.s3.get_object(Bucket=bucket, Key=key)["Body"].read()))
    bronze = f"s3://{pipeline.bronze_bucket}/"
    assert manifests[0] == {
        "files": [
            {"key": bronze + cdc_key("items", "120000300"), "size": 100},
            {"key": bronze + cdc_key("orders", "120000100"), "size": 100},
            {"key": bronze + cdc_key("orders", "120000200"), "size": 100},
        ]
    }
    assert manifests[1] == {"files": [{"key": bronze + cdc_key("orders", "120000400"), "size": 100}]}
    # AND the queue is empty, and acknowledging came after each job (never before)
    assert pipeline.queue_bodies() == []
    entered = pipeline.states_entered(execution)
    assert entered.count("AcknowledgeBatch") == 2
    assert entered.index("RunCdcJob") < entered.index("AcknowledgeBatch")


def test_failed_cdc_job_releases_its_batch_at_once_and_alerts(pipeline: Pipeline) -> None:
    # GIVEN a queued file and a CDC job that fails
    pipeline.gaps.failing_jobs.add(pipeline.cdc_job)
    key = cdc_key("orders", "120000100")
    pipeline.send_file(key, 100)
    execution = pipeline.start({"fullLoadDone": True})
    result = pipeline.wait_until_done(execution)
    # THEN the execution fails and alerts, without acknowledging the batch
    assert result["status"] == "FAILED"
    entered = pipeline.states_entered(execution)
    assert "AcknowledgeBatch" not in entered
    assert entered[entered.index("RunCdcJob") :] == [
        "RunCdcJob", "ReleaseBatch", "ReleaseEntry", "ReleaseBatchMessages", "CountReleaseFailures",
        "WasBatchReleased", "NotifyBatchFailed", "PipelineFailed",
    ]  # fmt: skip
    [alert] = pipeline.alerts()
    assert alert["Subject"] == "cdclake: the pipeline stopped"
    assert "States.TaskFailed" in alert["Message"]
    assert "simulated failure of cdclake-cdc" in alert["Message"]
    assert "The failed batch (1 messages) was made visible again in the queue at once" in alert["Message"]
    # AND the batch is visible again at once, not held in flight for the 12-hour visibility timeout
    counts = pipeline.sqs.get_queue_attributes(QueueUrl=pipeline.queue_url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("1", "0")
    # WHEN the job is repaired and the pipeline restarted THEN the same file is applied and acknowledged
    pipeline.gaps.failing_jobs.clear()
    restarted = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(restarted, "AcknowledgeBatch")
    runs = sorted(pipeline.job_runs(pipeline.cdc_job), key=lambda r: r["StartedOn"])
    assert len(runs) == 2
    assert [f["key"] for f in manifest_of(pipeline, runs[1])["files"]] == [f"s3://{pipeline.bronze_bucket}/{key}"]
    pipeline.wait_for_state(restarted, "WaitForFiles")
    assert pipeline.queue_bodies() == []


def test_an_empty_receive_waits_instead_of_spinning(pipeline: Pipeline) -> None:
    # GIVEN two queued files whose message group is held by a batch in flight elsewhere (another consumer,
    # or a crashed execution): the queue reports a visible message, but a receive returns nothing
    pipeline.send_file(cdc_key("orders", "120000100"), 100)
    pipeline.send_file(cdc_key("orders", "120000200"), 100)
    held = pipeline.sqs.receive_message(QueueUrl=pipeline.queue_url, MaxNumberOfMessages=1, VisibilityTimeout=600)
    assert len(held["Messages"]) == 1
    # WHEN the pipeline runs its three iterations
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN every iteration that received nothing waited PollSeconds before asking again, and nothing ran
    entered = pipeline.states_entered(execution)
    loop = entered[entered.index("ReadQueueDepth") :]
    assert loop.count("DequeueBatch") == 3
    for i, name in enumerate(loop):
        if name == "DequeueBatch":
            assert loop[i + 1 : i + 4] == ["HasFiles", "WaitForFiles", "NextIteration"], loop
    assert "RunCdcJob" not in entered and "AcknowledgeBatch" not in entered
    assert [payload for _, payload in pipeline.gaps.lambda_calls if "receiptHandles" in payload] == []


@pytest.mark.parametrize("pipeline", [{"MaxIterations": "12"}], indirect=True)
def test_large_files_are_all_applied_and_never_dead_lettered(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the default batch limits (10 files, 512 MB) and ten queued 300 MB files: only one fits a batch,
    # so every receive hands the other nine back to the queue
    monkeypatch.setenv("MAX_FILES_PER_BATCH", "10")
    monkeypatch.setenv("MAX_BYTES_PER_BATCH", str(512 * 1024 * 1024))
    keys = [cdc_key("orders", f"1200{n:02d}000") for n in range(10)]
    for key in keys:
        pipeline.send_file(key, 300 * 1024 * 1024)
    # WHEN the pipeline runs
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution, timeout=60)["status"] == "SUCCEEDED"
    # THEN ten CDC runs applied the ten files, one each, in order, and none reached the dead-letter queue
    runs = sorted(pipeline.job_runs(pipeline.cdc_job), key=lambda r: r["StartedOn"])
    applied = [f["key"] for run in runs for f in manifest_of(pipeline, run)["files"]]
    assert applied == [f"s3://{pipeline.bronze_bucket}/{key}" for key in keys]
    assert pipeline.queue_bodies(pipeline.dlq_url) == []
    assert pipeline.queue_bodies() == []


def test_empty_queue_waits_and_polls_again(pipeline: Pipeline) -> None:
    execution = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(execution, "ReadQueueDepth", times=2)
    entered = pipeline.states_entered(execution)
    assert entered.index("WaitForFiles") < len(entered) - entered[::-1].index("ReadQueueDepth") - 1
    assert "DequeueBatch" not in entered
    assert pipeline.gaps.lambda_calls == []


def test_loop_threshold_hands_over_to_a_new_execution(pipeline: Pipeline) -> None:
    # MaxIterations is 3 in the fixture: after 3 loop iterations the execution starts its successor.
    execution = pipeline.start({"fullLoadDone": True, "generation": 4})
    result = pipeline.wait_until_done(execution)
    assert result["status"] == "SUCCEEDED"
    assert pipeline.states_entered(execution).count("ReadQueueDepth") == 3
    executions = pipeline.sfn.list_executions(stateMachineArn=pipeline.state_machine_arn)["executions"]
    successors = [e for e in executions if e["executionArn"] != execution]
    assert len(successors) == 1
    successor_input = json.loads(pipeline.sfn.describe_execution(executionArn=successors[0]["executionArn"])["input"])
    assert successor_input["fullLoadDone"] is True
    assert successor_input["generation"] == 5
    assert successor_input["predecessor"] == execution
    # The successor skips the full load and goes straight to the queue.
    pipeline.wait_for_state(successors[0]["executionArn"], "ReadQueueDepth")
    assert "DescribeReplicationTasks" not in pipeline.states_entered(successors[0]["executionArn"])


def test_a_second_execution_is_refused(pipeline: Pipeline) -> None:
    first = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(first, "ReadQueueDepth")
    second = pipeline.start({"fullLoadDone": True})
    result = pipeline.wait_until_done(second)
    assert result["status"] == "FAILED"
    assert result["error"] == "AnotherExecutionRunning"
    assert pipeline.sfn.describe_execution(executionArn=first)["status"] == "RUNNING"


# ---------------------------------------------------------------------------------- table maintenance
# The fixture runs maintenance every 2 loop iterations (MaintenanceEveryIterations) and hands over after 3.


def job_runs_in_order(pipeline: Pipeline) -> list[str]:
    """The Glue jobs that ran, in order - after proving that each run ended before the next one started."""
    timeline = pipeline.gaps.glue_timeline
    starts, ends = timeline[0::2], timeline[1::2]
    assert [event for event, _, _ in starts] == ["start"] * len(starts), timeline
    assert [event for event, _, _ in ends] == ["end"] * len(ends), timeline
    # start A, end A, start B, end B ...: every run ended before the next started, so none overlapped.
    assert [(job, run) for _, job, run in starts] == [(job, run) for _, job, run in ends], timeline
    return [job for _, job, _ in starts]


def test_maintenance_runs_on_every_second_iteration_between_cdc_jobs(pipeline: Pipeline) -> None:
    # GIVEN seven queued CDC files: three batches of at most 3 files, one per loop iteration
    for stamp in range(7):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    # WHEN one execution runs its 3 iterations and hands over
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN maintenance ran once, after the second batch was applied and acknowledged, and before the third began
    assert job_runs_in_order(pipeline) == [
        pipeline.cdc_job,
        pipeline.cdc_job,
        pipeline.maintenance_job,
        pipeline.cdc_job,
    ]
    entered = pipeline.states_entered(execution)
    assert entered.count("RunMaintenanceJob") == 1
    acknowledged = [i for i, name in enumerate(entered) if name == "AcknowledgeBatch"]
    cdc_runs = [i for i, name in enumerate(entered) if name == "RunCdcJob"]
    assert acknowledged[1] < entered.index("RunMaintenanceJob") < cdc_runs[2]
    assert pipeline.queue_bodies() == []
    # AND the count goes on in the successor: one iteration since maintenance was handed over, so the
    # successor's first iteration (an empty poll) is the second one and runs maintenance again
    [successor] = [
        e["executionArn"]
        for e in pipeline.sfn.list_executions(stateMachineArn=pipeline.state_machine_arn)["executions"]
        if e["executionArn"] != execution
    ]
    assert json.loads(pipeline.sfn.describe_execution(executionArn=successor)["input"])["sinceMaintenance"] == 1
    pipeline.wait_for_state(successor, "MaintenanceDone")
    entered = pipeline.states_entered(successor)
    first_poll, maintenance = entered.index("ReadQueueDepth"), entered.index("RunMaintenanceJob")
    assert "WaitForFiles" in entered[first_poll:maintenance]
    assert "ReadQueueDepth" not in entered[first_poll + 1 : maintenance]
    assert job_runs_in_order(pipeline)[4:] == [pipeline.maintenance_job]


def test_failed_maintenance_alerts_and_the_pipeline_keeps_applying_cdc(pipeline: Pipeline) -> None:
    # GIVEN a maintenance job that fails, and four queued files (two batches, then an empty poll)
    pipeline.gaps.failing_jobs.add(pipeline.maintenance_job)
    for stamp in range(4):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    # WHEN the execution runs its 3 iterations
    execution = pipeline.start({"fullLoadDone": True})
    result = pipeline.wait_until_done(execution)
    # THEN it did not stop: it alerted once, went on to the third iteration and handed over as usual
    assert result["status"] == "SUCCEEDED"
    [alert] = pipeline.alerts()
    assert alert["Subject"] == "cdclake: table maintenance failed"
    assert "simulated failure of cdclake-maintenance" in alert["Message"]
    entered = pipeline.states_entered(execution)
    assert entered.count("RunMaintenanceJob") == 1  # the count restarted: not tried again at once
    assert entered.index("NotifyMaintenanceFailed") < len(entered) - entered[::-1].index("ReadQueueDepth") - 1
    assert "NotifyFailure" not in entered
    assert job_runs_in_order(pipeline) == [pipeline.cdc_job, pipeline.cdc_job, pipeline.maintenance_job]
    assert pipeline.queue_bodies() == []


@pytest.mark.parametrize("pipeline", [{"MaintenanceEveryIterations": "0"}], indirect=True)
def test_maintenance_every_zero_iterations_never_runs_it(pipeline: Pipeline) -> None:
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    assert pipeline.states_entered(execution).count("ReadQueueDepth") == 3
    assert "RunMaintenanceJob" not in pipeline.states_entered(execution)
    assert pipeline.gaps.glue_timeline == []


# ---------------------------------------------------------------------------------------- gold marts
# GoldEveryIterations is 0 in the fixture; these tests turn it on. Maintenance still runs every 2 iterations.


@pytest.mark.parametrize("pipeline", [{"GoldEveryIterations": "2"}], indirect=True)
def test_gold_runs_every_second_iteration_after_cdc_and_before_maintenance(pipeline: Pipeline) -> None:
    # GIVEN seven queued CDC files: three batches of at most 3 files, one per loop iteration
    for stamp in range(7):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    # WHEN one execution runs its 3 iterations and hands over
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN the gold job ran once, after the second batch was applied and acknowledged, in the serial lane:
    # no two Glue jobs overlapped, gold before maintenance (it reads silver before files are rewritten)
    assert job_runs_in_order(pipeline) == [
        pipeline.cdc_job,
        pipeline.cdc_job,
        pipeline.gold_job,
        pipeline.maintenance_job,
        pipeline.cdc_job,
    ]
    entered = pipeline.states_entered(execution)
    acknowledged = [i for i, name in enumerate(entered) if name == "AcknowledgeBatch"]
    assert acknowledged[1] < entered.index("RunGoldJob") < entered.index("RunMaintenanceJob")
    assert entered.count("RunGoldJob") == 1 and "NotifyGoldFailed" not in entered
    [run] = pipeline.job_runs(pipeline.gold_job)
    assert run["JobRunState"] == "SUCCEEDED"
    # AND the successor carries the count on: one iteration since gold, and silver changed (the third batch)
    successor = pipeline.successor_of(execution)
    handed_over = pipeline.input_of(successor)
    assert (handed_over["sinceGold"], handed_over["silver"]) == (1, {"changed": True})
    # AND so its first iteration (an empty poll) is the second one since gold and refreshes the third batch
    pipeline.wait_for_state(successor, "GoldDone")
    entered = pipeline.states_entered(successor)
    assert entered.index("WaitForFiles") < entered.index("RunGoldJob")
    assert job_runs_in_order(pipeline)[5:] == [pipeline.gold_job, pipeline.maintenance_job]


@pytest.mark.parametrize("pipeline", [{"GoldEveryIterations": "1", "MaintenanceEveryIterations": "0"}], indirect=True)
def test_gold_waits_for_a_cdc_batch_when_silver_did_not_change(pipeline: Pipeline) -> None:
    # GIVEN gold due every iteration, and an execution handed over with no batch applied since the last gold run
    execution = pipeline.start({"fullLoadDone": True, "sinceGold": 5, "silver": {"changed": False}})
    # WHEN its first two iterations find the queue empty
    pipeline.wait_for_state(execution, "WaitForFiles", times=2)
    assert "RunGoldJob" not in pipeline.states_entered(execution)
    # AND then a file arrives
    pipeline.send_file(cdc_key("orders", "120000000"), 100)
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN gold ran once, right after that batch, and not after the empty polls
    assert job_runs_in_order(pipeline) == [pipeline.cdc_job, pipeline.gold_job]
    entered = pipeline.states_entered(execution)
    assert entered.index("RunCdcJob") < entered.index("RunGoldJob")
    assert pipeline.state_input(execution, "StartSuccessor")["silver"] == {"changed": False}


@pytest.mark.parametrize("pipeline", [{"GoldEveryIterations": "1", "MaintenanceEveryIterations": "0"}], indirect=True)
def test_a_fresh_start_refreshes_the_marts_once_without_waiting_for_cdc(pipeline: Pipeline) -> None:
    # GIVEN an execution started by hand (no hand-over input) and an empty queue
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN gold ran once, in the first iteration (the marts may lag silver after a stop or a redeploy), then not again
    assert pipeline.states_entered(execution).count("ReadQueueDepth") == 3
    assert job_runs_in_order(pipeline) == [pipeline.gold_job]


def test_gold_every_zero_iterations_never_runs_it(pipeline: Pipeline) -> None:
    # GIVEN the fixture's GoldEveryIterations 0, seven files (three batches) and maintenance every 2 iterations
    for stamp in range(7):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN every batch was applied, maintenance ran, and gold never did
    assert "RunGoldJob" not in pipeline.states_entered(execution)
    assert job_runs_in_order(pipeline) == [
        pipeline.cdc_job,
        pipeline.cdc_job,
        pipeline.maintenance_job,
        pipeline.cdc_job,
    ]
    assert pipeline.job_runs(pipeline.gold_job) == []


@pytest.mark.parametrize("pipeline", [{"GoldEveryIterations": "1", "MaintenanceEveryIterations": "0"}], indirect=True)
def test_failed_gold_alerts_and_the_pipeline_keeps_applying_cdc(pipeline: Pipeline) -> None:
    # GIVEN a gold job that fails (a broken mart) and four queued files (two batches, then an empty poll)
    pipeline.gaps.failing_jobs.add(pipeline.gold_job)
    for stamp in range(4):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    # WHEN the execution runs its 3 iterations
    execution = pipeline.start({"fullLoadDone": True})
    result = pipeline.wait_until_done(execution)
    # THEN it did not stop: each failure was caught and alerted, every batch was applied and acknowledged,
    # and it handed over as usual
    assert result["status"] == "SUCCEEDED"
    alerts = pipeline.alerts()
    assert [a["Subject"] for a in alerts] == ["cdclake: gold mart refresh failed"] * 2
    assert all("simulated failure of cdclake-gold" in a["Message"] for a in alerts)
    entered = pipeline.states_entered(execution)
    assert "NotifyFailure" not in entered and "ReleaseBatch" not in entered
    assert entered.count("NotifyGoldFailed") == 2 and entered[-2:] == ["StartSuccessor", "HandedOver"]
    # gold after each batch, not after the empty poll (silver.changed was cleared by the failed run too)
    assert job_runs_in_order(pipeline) == [pipeline.cdc_job, pipeline.gold_job] * 2
    assert [r["JobRunState"] for r in pipeline.job_runs(pipeline.gold_job)] == ["FAILED", "FAILED"]
    assert pipeline.queue_bodies() == []


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
        "fullLoadDone": False, "generation": 3, "predecessor": execution, "sinceMaintenance": 0,
        "sinceGold": 0, "silver": {"changed": True}, "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID": execution,
    }  # fmt: skip
    pipeline.wait_for_state(successor, "DescribeReplicationTasks")


@pytest.mark.parametrize("pipeline", [{"MaxHistoryEvents": "130", "MaxIterations": "50"}], indirect=True)
def test_the_cdc_loop_hands_over_on_the_events_it_spent(pipeline: Pipeline) -> None:
    # GIVEN files for two batches (3 files each at most) and maintenance every 2 iterations
    for stamp in range(5):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN it handed over after 3 iterations (30 + 3 x 39 + 14 for maintenance = 161 >= 130), not after 50
    entered = pipeline.states_entered(execution)
    assert entered.count("ReadQueueDepth") == 3
    assert entered.count("RunCdcJob") == 2 and entered.count("RunMaintenanceJob") == 1
    assert assert_counter_covers_history(pipeline, execution) == 161


@pytest.mark.parametrize(
    "pipeline", [{"MaxHistoryEvents": "130", "MaxIterations": "50", "GoldEveryIterations": "1"}], indirect=True
)
def test_gold_runs_are_counted_in_the_history_budget(pipeline: Pipeline) -> None:
    # GIVEN a failing gold job run after every batch (the longest gold path: job, alert, Pass), and two batches
    pipeline.gaps.failing_jobs.add(pipeline.gold_job)
    for stamp in range(5):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN 30 + 2 x (39 + 14) + 14 for maintenance = 150 >= 130: it handed over after 2 iterations,
    # and the events it counted cover its real history
    entered = pipeline.states_entered(execution)
    assert entered.count("ReadQueueDepth") == 2
    assert entered.count("RunGoldJob") == 2 and entered.count("NotifyGoldFailed") == 2
    assert assert_counter_covers_history(pipeline, execution) == 150


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
    assert pipeline.states_entered(execution).count("ReadQueueDepth") == 1
    assert pipeline.states_entered(execution)[-2:] == ["StartSuccessor", "HandedOver"]


# ------------------------------------------------------------------ issue 25: batches never held too long


def failing_after_its_work(pipeline: Pipeline, error_type: str, times: int = 1) -> list[dict[str, Any]]:
    """Make DequeueBatch do its whole work (receive, manifest) and then fail ``times`` times with ``error_type``.

    As a Lambda that times out after its work, a Powertools failure on the way out, or a `Lambda.*` error
    Step Functions sees after a successful run. The results it would have returned are collected.
    """
    name = "cdclake-dequeue_batch"
    real = pipeline.gaps.lambda_handlers[name]
    failure = type(error_type, (Exception,), {})
    returned: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], context: Any) -> Any:
        result = real(event, context)
        returned.append(result)
        if len(returned) <= times:
            raise failure("failed after its work")
        return result

    pipeline.gaps.lambda_handlers[name] = handler
    return returned


def queue_counts(pipeline: Pipeline) -> tuple[int, int]:
    """(visible, in flight) messages of the file queue."""
    counts = pipeline.sqs.get_queue_attributes(QueueUrl=pipeline.queue_url, AttributeNames=["All"])["Attributes"]
    return int(counts["ApproximateNumberOfMessages"]), int(counts["ApproximateNumberOfMessagesNotVisible"])


def test_a_dequeue_that_times_out_after_receiving_holds_the_batch_only_briefly_and_says_so(
    pipeline: Pipeline,
) -> None:
    # GIVEN three queued files and a DequeueBatch that times out after receiving them and writing the manifest
    for stamp in range(3):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    returned = failing_after_its_work(pipeline, "Sandbox.Timedout")
    # WHEN the pipeline runs
    execution = pipeline.start({"fullLoadDone": True})
    result = pipeline.wait_until_done(execution)
    # THEN it fails and alerts, and the alert says what really happens to the received messages
    assert result["status"] == "FAILED"
    assert len(returned[0]["receiptHandles"]) == 3
    [alert] = pipeline.alerts()
    assert alert["Subject"] == "cdclake: the pipeline stopped"
    assert "Sandbox.Timedout" in alert["Message"]
    assert f"visible again in the queue within {RECEIVE_VISIBILITY_SECONDS} seconds" in alert["Message"]
    assert "was made visible again" not in alert["Message"]
    # AND the three messages come back after the short receive visibility, not the queue's long one
    assert queue_counts(pipeline) == (0, 3)
    time.sleep(RECEIVE_VISIBILITY_SECONDS + 0.5)
    assert queue_counts(pipeline) == (3, 0)


@pytest.mark.parametrize("pipeline", [{"MaxIterations": "6"}], indirect=True)
def test_a_dequeue_retried_after_a_successful_run_does_not_stall_the_queue(pipeline: Pipeline) -> None:
    # GIVEN three queued files and a DequeueBatch whose successful run Step Functions sees as Lambda.ServiceException:
    # the state's Retry invokes it again while the first run's messages are in flight (their group is held)
    keys = [cdc_key("orders", f"12000{stamp}000") for stamp in range(3)]
    for key in keys:
        pipeline.send_file(key, 100)
    failing_after_its_work(pipeline, "Lambda.ServiceException")
    # WHEN the pipeline runs its iterations
    execution = pipeline.start({"fullLoadDone": True})
    assert pipeline.wait_until_done(execution, timeout=40)["status"] == "SUCCEEDED"
    # THEN the files were applied in order by this execution (after the short receive visibility), and the queue drained
    runs = sorted(pipeline.job_runs(pipeline.cdc_job), key=lambda r: r["StartedOn"])
    applied = [f["key"] for run in runs for f in manifest_of(pipeline, run)["files"]]
    assert applied == [f"s3://{pipeline.bronze_bucket}/{key}" for key in keys]
    assert pipeline.queue_bodies() == []
    assert pipeline.alerts() == []


def test_a_batch_is_held_for_its_whole_cdc_job_once_the_job_starts(pipeline: Pipeline) -> None:
    # GIVEN a CDC job that runs longer than the receive visibility
    pipeline.gaps.running_seconds[pipeline.cdc_job] = RECEIVE_VISIBILITY_SECONDS + 1.5
    for stamp in range(2):
        pipeline.send_file(cdc_key("orders", f"12000{stamp}000"), 100)
    execution = pipeline.start({"fullLoadDone": True})
    pipeline.wait_for_state(execution, "RunCdcJob")
    # WHEN the receive visibility has passed while the job still runs
    time.sleep(RECEIVE_VISIBILITY_SECONDS + 0.5)
    # THEN the batch is still in flight (extended just before the job started), and acknowledged after it
    assert queue_counts(pipeline) == (0, 2)
    pipeline.wait_for_state(execution, "AcknowledgeBatch")
    pipeline.wait_for_state(execution, "NextIteration")
    assert queue_counts(pipeline) == (0, 0)
    entered = pipeline.states_entered(execution)
    assert entered.index("DequeueBatch") < entered.index("HoldBatch") < entered.index("RunCdcJob")


# --------------------------------------------------------------------- issue 25: the successor's start


def test_a_successor_start_delivered_twice_starts_one_successor(pipeline: Pipeline) -> None:
    # GIVEN a hand-over whose StartExecution reaches Step Functions but whose answer is lost (SdkClientException):
    # the state's Retry delivers the start a second time
    pipeline.gaps.lose_first_start_response = True
    execution = pipeline.start({"fullLoadDone": True, "generation": 4})
    # WHEN the execution hands over
    assert pipeline.wait_until_done(execution)["status"] == "SUCCEEDED"
    # THEN exactly one successor runs, named after its predecessor and generation, and it consumes the queue
    assert pipeline.gaps.successor_starts == 2
    executions = pipeline.sfn.list_executions(stateMachineArn=pipeline.state_machine_arn)["executions"]
    successors = [e for e in executions if e["executionArn"] != execution]
    assert len(successors) == 1, successors
    assert successors[0]["name"].startswith("g5-")
    pipeline.wait_for_state(successors[0]["executionArn"], "ReadQueueDepth")
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
    assert pipeline.alerts() == []

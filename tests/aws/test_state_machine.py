"""The state machine definition executed by moto's Step Functions interpreter, scenario by scenario.

The definition file is used as deployed (placeholders filled as CloudFormation would); moto's gaps are
patched in the `moto_step_functions_gaps` fixture (conftest.py), and our Lambda handlers run in-process.
"""

from __future__ import annotations

import json

import pytest
from conftest import Pipeline


def cdc_key(table: str, stamp: str) -> str:
    return f"dms/sales/{table}/20240301-{stamp}.csv"


def test_full_load_in_progress_waits_and_checks_again(pipeline: Pipeline) -> None:
    # GIVEN a DMS task whose full load is at 40 %
    pipeline.gaps.full_load_percent[pipeline.task_arn] = 40
    # WHEN the pipeline starts
    execution = pipeline.start({})
    # THEN it waits and asks DMS again, and never starts the full-load job
    pipeline.wait_for_state(execution, "DescribeReplicationTasks", times=2)
    assert "WaitForFullLoad" in pipeline.states_entered(execution)
    assert pipeline.job_runs(pipeline.full_load_job) == []
    # WHEN the full load completes THEN the full-load job runs
    pipeline.gaps.full_load_percent[pipeline.task_arn] = 100
    pipeline.wait_for_state(execution, "WaitForFiles")
    assert len(pipeline.job_runs(pipeline.full_load_job)) == 1


def test_full_load_complete_runs_the_full_load_job_once(pipeline: Pipeline) -> None:
    execution = pipeline.start({})
    # The empty queue makes the loop wait; by then the full load ran, and it does not run again.
    pipeline.wait_for_state(execution, "WaitForFiles", times=2)
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


def test_failed_cdc_job_keeps_the_messages_and_alerts(pipeline: Pipeline) -> None:
    pipeline.gaps.failing_jobs.add(pipeline.cdc_job)
    key = cdc_key("orders", "120000100")
    pipeline.send_file(key, 100)
    execution = pipeline.start({"fullLoadDone": True})
    result = pipeline.wait_until_done(execution)
    assert result["status"] == "FAILED"
    assert "AcknowledgeBatch" not in pipeline.states_entered(execution)
    # The message is still in the queue (in flight until the visibility timeout; made visible here to look).
    messages = pipeline.sqs.get_queue_attributes(
        QueueUrl=pipeline.queue_url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    assert messages["ApproximateNumberOfMessagesNotVisible"] == "1"
    [alert] = pipeline.alerts()
    assert alert["Subject"] == "cdclake: the pipeline stopped"
    assert "States.TaskFailed" in alert["Message"]
    assert "simulated failure of cdclake-cdc" in alert["Message"]


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

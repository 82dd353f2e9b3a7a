"""``verify.job.start_verify_after_reload``: a reload (a full-load run given --tables) starts the verify job for
exactly the tables it loaded, queued behind a verify run already active; a run that loaded nothing starts none.
Against moto's Glue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from cdclake.report import Outcome, OutcomeKind, RunReport, TableFailure, TableReport
from cdclake.verify.job import start_verify_after_reload

JOB = "cdclake-dev-verify"


@pytest.fixture
def glue(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("glue", region_name="us-east-1")
        client.create_job(Name=JOB, Role="arn:aws:iam::123456789012:role/verify", Command={"Name": "glueetl"})
        yield client


def _runs(glue: Any) -> list[dict[str, Any]]:
    return list(glue.get_job_runs(JobName=JOB)["JobRuns"])


def test_the_tables_a_reload_loaded_are_verified_and_the_failed_ones_are_not(glue: Any) -> None:
    # GIVEN a reload that loaded s.b and s.a, failed on s.c, found s.e already loaded (a retried run), had nothing to
    # load for s.f, and also ran CDC for s.d
    report = RunReport(
        tables=[
            TableReport("s.b", "full-load", loaded=True), TableReport("s.a", "full-load", loaded=True),
            TableReport("s.e", "full-load", outcome=Outcome(OutcomeKind.ALREADY_LOADED)),
            TableReport("s.f", "full-load", outcome=Outcome(OutcomeKind.LEFT_TO_CDC, "s/f")),
            TableReport("s.d", "cdc"),
        ],
        failures=[TableFailure("s.c", "full-load", RuntimeError("timed out"))],
    )  # fmt: skip
    report.tables.append(TableReport("s.c", "full-load", loaded=True))  # a table that failed after it was loaded
    # WHEN the verify job is started after it
    run_id = start_verify_after_reload(glue, JOB, report)
    # THEN one run of the verify job compares exactly the loaded tables, in order
    [run] = _runs(glue)
    assert run["Id"] == run_id
    assert run["Arguments"] == {"--tables": "s.a,s.b"}


def test_a_reload_that_loaded_nothing_starts_no_verify(glue: Any) -> None:
    failed = RunReport(failures=[TableFailure("s.c", "full-load", RuntimeError("timed out"))])
    assert start_verify_after_reload(glue, JOB, failed) is None
    retried = RunReport(tables=[TableReport("s.a", "full-load", outcome=Outcome(OutcomeKind.ALREADY_LOADED))])
    assert start_verify_after_reload(glue, JOB, retried) is None
    assert start_verify_after_reload(glue, JOB, RunReport()) is None
    assert _runs(glue) == []


def test_the_start_asks_glue_to_queue_the_run_behind_an_active_one() -> None:
    # GIVEN a Glue client that records what it is asked (moto keeps no JobRunQueuingEnabled to read back)
    asked: list[dict[str, Any]] = []

    class Recording:
        def start_job_run(self, **request: Any) -> dict[str, str]:
            asked.append(request)
            return {"JobRunId": "jr_1"}

    # WHEN a reload of one table starts the verify job
    start_verify_after_reload(Recording(), JOB, RunReport(tables=[TableReport("s.a", "full-load", loaded=True)]))
    # THEN the run is queued (Glue job run queuing) rather than refused when a verify run is active
    assert asked == [{"JobName": JOB, "Arguments": {"--tables": "s.a"}, "JobRunQueuingEnabled": True}]

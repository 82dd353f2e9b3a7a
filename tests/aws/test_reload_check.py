"""The full-load lane of CheckWork: the CDC lane's reload request against the full-load job's runs (moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from conftest import MotoStepFunctionsGaps, patch_moto_gaps
from moto import mock_aws
from reloads import FullLoadRun, ReloadRequest, decide_reload, full_load_runs, mark_alerted, parse_request, read_request

FULL_LOAD_JOB = "cdclake-test-full-load"
URI = "s3://artifacts/state/reloads.json"
T0 = datetime(2024, 1, 2, 3, 0, tzinfo=UTC)


def _request(*tables: str, alerted: bool = False) -> ReloadRequest:
    return ReloadRequest(tuple(tables), {t: "a reload" for t in tables}, T0, alerted)


def _run(state: str, tables: str = "s.a", minutes: int = 1) -> FullLoadRun:
    return FullLoadRun(state, tables, T0 + timedelta(minutes=minutes))


def test_nothing_requested_starts_nothing() -> None:
    assert decide_reload(None, []).start is False
    assert decide_reload(_request(), [_run("FAILED")]).start is False


def test_a_request_starts_the_job_for_exactly_its_tables() -> None:
    decision = decide_reload(_request("s.a", "s.b"), [_run("SUCCEEDED", tables="")])  # the first full load: not it
    assert (decision.start, decision.alert, decision.as_payload()["tables"]) == (True, False, "s.a,s.b")
    assert decision.as_payload()["reasons"] == "s.a: a reload; s.b: a reload"


def test_no_second_run_while_one_is_active_and_none_after_one_succeeded() -> None:
    assert decide_reload(_request("s.a"), [_run("RUNNING", tables="s.x")]).reason == "a full-load run is active"
    done = decide_reload(_request("s.a"), [_run("SUCCEEDED")])
    assert (done.start, done.reason) == (False, "loaded since the request (the CDC job clears it)")
    # a success before the request was written is another request's
    assert decide_reload(_request("s.a"), [_run("SUCCEEDED", minutes=-5)]).start is True


def test_a_reload_that_keeps_failing_is_given_up_after_three_runs_and_alerted_once() -> None:
    failed = [_run("FAILED", minutes=1), _run("TIMEOUT", minutes=2)]
    assert (decide_reload(_request("s.a"), failed).start, decide_reload(_request("s.a"), failed).failures) == (True, 2)
    failed.append(_run("ERROR", minutes=3))
    given_up = decide_reload(_request("s.a"), failed)
    assert (given_up.start, given_up.alert, given_up.failures) == (False, True, 3)
    assert decide_reload(_request("s.a", alerted=True), failed).alert is False


@dataclass
class Store:
    s3: Any
    glue: Any
    gaps: MotoStepFunctionsGaps


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    gaps = patch_moto_gaps(monkeypatch)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        glue = boto3.client("glue", region_name="us-east-1")
        s3.create_bucket(Bucket="artifacts")
        glue.create_job(Name=FULL_LOAD_JOB, Role="arn:aws:iam::123456789012:role/glue", Command={"Name": "glueetl"})
        yield Store(s3, glue, gaps)


def test_the_request_and_the_runs_are_read_as_the_cdc_job_and_glue_write_them(store: Store) -> None:
    # GIVEN no request yet, then one as the CDC job writes it (cdclake.ops.reload_requests)
    assert read_request(store.s3, URI) is None
    text = json.dumps({"tables": ["s.a"], "reasons": {"s.a": "a reload"}, "updated": "2024-01-02T03:00:00Z"})
    store.s3.put_object(Bucket="artifacts", Key="state/reloads.json", Body=text.encode())
    # AND a full-load run for it that failed (moto's runs end at once; the gap fixture fails them)
    store.gaps.failing_jobs.add(FULL_LOAD_JOB)
    store.glue.start_job_run(JobName=FULL_LOAD_JOB, Arguments={"--tables": "s.a"})
    # WHEN read
    request = parse_request(read_request(store.s3, URI) or "")
    [run] = full_load_runs(store.glue, FULL_LOAD_JOB)
    # THEN the request and the run's tables and state are what was written
    assert (request.tables, request.updated, request.alerted) == (("s.a",), T0, False)
    assert (run.tables, run.state) == ("s.a", "FAILED")
    # AND an alert is recorded in the request, keeping what the CDC job wrote
    mark_alerted(store.s3, URI, text)
    assert parse_request(read_request(store.s3, URI) or "") == ReloadRequest(("s.a",), {"s.a": "a reload"}, T0, True)


def test_only_the_request_key_itself_counts_as_a_request(store: Store) -> None:
    # GIVEN a neighbour of the request's key (same prefix) and no request
    store.s3.put_object(Bucket="artifacts", Key="state/reloads.json.old", Body=b'{"tables": ["s.x"]}')
    # WHEN read THEN there is no request
    assert read_request(store.s3, URI) is None


class RefusingS3:
    """An S3 client whose calls are refused, as S3 answers a role that may not list or read the key."""

    def list_objects_v2(self, **_: Any) -> Any:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "ListObjectsV2")


def test_a_refused_listing_is_raised_not_taken_for_no_request() -> None:
    # GIVEN a role that may not list the request's key WHEN the request is read THEN AccessDenied is raised
    with pytest.raises(ClientError, match="AccessDenied"):
        read_request(RefusingS3(), URI)  # type: ignore[arg-type]

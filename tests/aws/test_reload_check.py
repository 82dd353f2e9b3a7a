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
from conftest import MotoStepFunctionsGaps, load_handler_module, patch_moto_gaps
from moto import mock_aws
from reloads import (
    FullLoadRun,
    ReloadRequest,
    decide_reload,
    full_load_runs,
    mark_alerted,
    parse_request,
    read_request,
    read_stored_request,
)
from work import WorkCheckSettings

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
    [(read, etag)] = [read_stored_request(store.s3, URI) or ("", "")]
    assert read == text
    assert mark_alerted(store.s3, URI, text, etag) is True
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


def test_marking_a_request_the_cdc_job_replaced_since_it_was_read_loses_and_changes_nothing(store: Store) -> None:
    # GIVEN a request read with its ETag, then replaced by the CDC job (another table now)
    first = json.dumps({"tables": ["s.a"], "reasons": {"s.a": "a reload"}, "updated": "2024-01-02T03:00:00Z"})
    store.s3.put_object(Bucket="artifacts", Key="state/reloads.json", Body=first.encode())
    text, etag = read_stored_request(store.s3, URI) or ("", "")
    second = json.dumps({"tables": ["s.b"], "reasons": {"s.b": "a reload"}, "updated": "2024-01-02T04:00:00Z"})
    store.s3.put_object(Bucket="artifacts", Key="state/reloads.json", Body=second.encode())
    # WHEN the old one is marked alerted THEN the conditional write (If-Match, S3's 412) loses: no error, and the
    # CDC job's request stands unmarked (moto 5.2.5 honours IfMatch on put_object as S3 does)
    assert mark_alerted(store.s3, URI, text, etag) is False
    assert read_request(store.s3, URI) == second


def test_a_check_that_lost_the_race_reads_the_request_again_and_decides_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a request given up on (three failed runs since it was written)
    app = load_handler_module("work_check")
    given_up = json.dumps({"tables": ["s.a"], "reasons": {"s.a": "a reload"}, "updated": "2024-01-02T03:00:00Z"})
    store.s3.put_object(Bucket="artifacts", Key="state/reloads.json", Body=given_up.encode())
    runs = [_run("FAILED", minutes=m) for m in (1, 2, 3)]
    # AND the CDC job writing a new request for another table just after the check read it
    reads = []
    original = app.read_stored_request

    def read_then_replaced(s3: Any, uri: str) -> tuple[str, str] | None:
        stored = original(s3, uri)
        reads.append(stored)
        if len(reads) == 1:
            newer = {"tables": ["s.b"], "reasons": {"s.b": "a reload"}, "updated": "2024-01-02T05:00:00Z"}
            store.s3.put_object(Bucket="artifacts", Key="state/reloads.json", Body=json.dumps(newer).encode())
        return stored

    monkeypatch.setattr(app, "read_stored_request", read_then_replaced)
    settings = WorkCheckSettings("q", "cdc", reload_requests_uri=URI, full_load_job_name=FULL_LOAD_JOB)
    # WHEN the check decides
    decision = app._reload(settings, runs)
    # THEN it did not alert about the request that was replaced: it read again and starts the new one's reload
    assert len(reads) == 2
    assert (decision["alert"], decision["start"], decision["tables"]) == (False, True, "s.b")
    assert parse_request(read_request(store.s3, URI) or "").alerted is False

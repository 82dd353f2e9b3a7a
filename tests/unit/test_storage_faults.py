"""Bronze on S3 under faults: throttling, 5xx, connection resets, timeouts and bodies that break
mid-object, injected with botocore event hooks on a moto-backed client (no network).

A ``before-send`` handler registered first answers a request before moto sees it: with an error
response (SlowDown, InternalError) or by raising the exception botocore raises for a reset or a
timeout. An ``after-call`` handler swaps a GetObject body for one that breaks after some bytes.
Waits are recorded, not slept.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError
from botocore.response import StreamingBody
from urllib3.exceptions import ProtocolError

from cdclake.dms.files import parse_key
from cdclake.dms.s3_bronze import S3Bronze
from cdclake.dms.store import StoreSettings, list_bronze
from cdclake.errors import BronzeError

from .conftest import BUCKET

SETTINGS = StoreSettings(max_attempts=4, body_attempts=3, chunk_bytes=1000)
PAYLOAD = b"".join(b"I,%d,row %d\n" % (i, i) for i in range(2000))  # about 25 KB


class _Raw:
    """The raw stream an AWSResponse reads its content from."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def error_response(status: int, code: str, message: str) -> Callable[[Any], AWSResponse]:
    body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    return lambda request: AWSResponse(request.url, status, {}, _Raw(body.encode()))


def slow_down(request: Any) -> AWSResponse:
    return error_response(503, "SlowDown", "Please reduce your request rate.")(request)


def internal_error(request: Any) -> AWSResponse:
    return error_response(500, "InternalError", "We encountered an internal error. Please try again.")(request)


def connection_reset(request: Any) -> AWSResponse:
    raise ConnectionClosedError(endpoint_url=request.url)


def read_timeout(request: Any) -> AWSResponse:
    raise ReadTimeoutError(endpoint_url=request.url)


@dataclass
class Faults:
    """Answers the first ``times`` requests of ``operation`` with ``fault``; counts every request."""

    operation: str
    fault: Callable[[Any], AWSResponse]
    times: int
    requests: list[Any] = field(default_factory=list)

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        self.requests.append(request)
        if len(self.requests) <= self.times:
            return self.fault(request)
        return None  # moto answers


def inject(client: Any, operation: str, fault: Callable[[Any], AWSResponse], times: int = 10**6) -> Faults:
    faults = Faults(operation, fault, times)
    client.meta.events.register_first(f"before-send.s3.{operation}", faults)
    return faults


class _BreakingStream:
    """A raw body that sends ``cut`` bytes and then loses the connection."""

    def __init__(self, data: bytes, cut: int) -> None:
        self.data, self.cut, self.sent = data, cut, 0

    def read(self, amt: int | None = None) -> bytes:
        if self.sent >= self.cut:
            raise ProtocolError("Connection broken: ConnectionResetError(104, 'Connection reset by peer')")
        end = min(self.cut, self.sent + (amt or len(self.data)))
        chunk, self.sent = self.data[self.sent : end], end
        return chunk

    def close(self) -> None:
        pass


@dataclass
class BodyBreaks:
    """Replaces the body of the first ``times`` GetObject answers with one that breaks after ``cut`` bytes."""

    cut: int
    times: int
    calls: int = 0

    def __call__(self, parsed: dict[str, Any], **_: Any) -> None:
        self.calls += 1
        if self.calls <= self.times:
            data = parsed["Body"].read()
            parsed["Body"] = StreamingBody(_BreakingStream(data, self.cut), len(data))


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every wait botocore asks for in this test's thread, recorded instead of slept (other threads
    of the test process, such as Spark's py4j threads, still sleep for real)."""
    waited: list[float] = []
    this_thread, real_sleep = threading.get_ident(), time.sleep

    def sleep(seconds: float) -> None:
        if threading.get_ident() == this_thread:
            waited.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    return waited


@pytest.fixture
def client(s3_client: Any) -> Any:
    """A client made the way the store makes it (standard retries, 4 attempts), on the moto bucket."""
    return boto3.client("s3", region_name="us-east-1", config=SETTINGS.client_config())


def store(client: Any, tmp_path: Path, waits: list[float]) -> S3Bronze:
    return S3Bronze(client, BUCKET, "dms", staging_dir=tmp_path / "staging", settings=SETTINGS, sleep=waits.append)


def put(client: Any, key: str, body: bytes) -> None:
    client.put_object(Bucket=BUCKET, Key=f"dms/{key}", Body=body)


# --------------------------------------------------------------------------- retried, then fine


@pytest.mark.parametrize("fault", [slow_down, internal_error, connection_reset, read_timeout], ids=lambda f: f.__name__)
def test_staging_retries_a_transient_fault(
    client: Any, tmp_path: Path, sleeps: list[float], fault: Callable[[Any], AWSResponse]
) -> None:
    # GIVEN an object whose first two GetObject requests fail with the fault
    put(client, "s/t/LOAD00000001.csv", PAYLOAD)
    faults = inject(client, "GetObject", fault, times=2)
    file = parse_key("s/t/LOAD00000001.csv", len(PAYLOAD))
    # WHEN it is staged for Spark
    paths = store(client, tmp_path, sleeps).spark_paths([file])
    # THEN the third request succeeds, after two backoff waits, and the staged copy is whole
    assert (len(faults.requests), len(sleeps), Path(paths[file.key]).read_bytes()) == (3, 2, PAYLOAD)
    assert all(wait > 0 for wait in sleeps)


def test_adaptive_mode_retries_throttling(s3_client: Any, tmp_path: Path, sleeps: list[float]) -> None:
    # GIVEN a client in adaptive mode (client-side rate limiting) and one throttled HeadObject
    adaptive = boto3.client(
        "s3", region_name="us-east-1", config=StoreSettings(retry_mode="adaptive", max_attempts=3).client_config()
    )
    put(adaptive, "s/t/LOAD00000001.csv", b"abc")
    faults = inject(adaptive, "HeadObject", error_response(503, "SlowDown", ""), times=1)
    # WHEN the object is sized / THEN the retry answers with its size
    assert (store(adaptive, tmp_path, sleeps).size("s/t/LOAD00000001.csv"), len(faults.requests)) == (3, 2)


def test_listing_retries_a_page_that_fails(client: Any, tmp_path: Path, sleeps: list[float]) -> None:
    # GIVEN 1,001 objects (two pages) and the second page's request failing twice with a 500
    for i in range(1001):
        put(client, f"s/t/LOAD{i + 1:08X}.csv", b"x")
    pages: list[Any] = []
    client.meta.events.register("before-call.s3.ListObjectsV2", lambda **kw: pages.append(kw))
    armed = {"left": 2}

    def fail_page_two(request: Any, **_: Any) -> AWSResponse | None:
        if len(pages) == 2 and armed["left"]:
            armed["left"] -= 1
            return internal_error(request)
        return None

    client.meta.events.register_first("before-send.s3.ListObjectsV2", fail_page_two)
    # WHEN the prefix is listed
    keys = list(store(client, tmp_path, sleeps).list_keys())
    # THEN every key comes back once, from two pages, after two waits
    assert (len(keys), len(set(keys)), len(pages), armed["left"], len(sleeps)) == (1001, 1001, 2, 0, 2)


def test_size_retries_a_connection_reset(client: Any, tmp_path: Path, sleeps: list[float]) -> None:
    # GIVEN an object and a HeadObject whose connection is reset three times (of four attempts)
    put(client, "s/t/LOAD00000001.csv", b"abc")
    faults = inject(client, "HeadObject", connection_reset, times=3)
    # WHEN / THEN its size comes from the fourth attempt
    assert (store(client, tmp_path, sleeps).size("s/t/LOAD00000001.csv"), len(faults.requests)) == (3, 4)


def test_read_head_retries_a_read_timeout(client: Any, tmp_path: Path, sleeps: list[float]) -> None:
    # GIVEN an object whose first range request times out
    put(client, "s/t/LOAD00000001.csv", PAYLOAD)
    inject(client, "GetObject", read_timeout, times=1)
    # WHEN its head is read / THEN the bytes are the object's first ones
    assert store(client, tmp_path, sleeps).read_head("s/t/LOAD00000001.csv", 100) == PAYLOAD[:100]


@pytest.mark.parametrize("breaks", [1, 2])
def test_a_body_that_breaks_mid_object_is_resumed(
    client: Any, tmp_path: Path, sleeps: list[float], breaks: int
) -> None:
    # GIVEN an object whose body breaks after 5,000 bytes, on the first ``breaks`` answers
    put(client, "s/t/LOAD00000001.csv", PAYLOAD)
    requests = inject(client, "GetObject", read_timeout, times=0)
    client.meta.events.register("after-call.s3.GetObject", BodyBreaks(cut=5000, times=breaks))
    file = parse_key("s/t/LOAD00000001.csv", len(PAYLOAD))
    # WHEN it is staged
    paths = store(client, tmp_path, sleeps).spark_paths([file])
    # THEN the staged copy is whole, and each resume asked for the missing bytes of the same version
    ranges = [r.headers.get("Range") for r in requests.requests]
    assert (Path(paths[file.key]).read_bytes() == PAYLOAD, ranges) == (
        True,
        [None] + [f"bytes={5000 * n}-".encode() for n in range(1, breaks + 1)],
    )
    assert all(r.headers.get("If-Match") for r in requests.requests[1:])
    assert len(sleeps) == breaks


# --------------------------------------------------------------------------- attempts run out: a clear error


def test_persistent_throttling_names_the_object(client: Any, tmp_path: Path, sleeps: list[float]) -> None:
    # GIVEN an object S3 keeps throttling
    put(client, "s/t/LOAD00000001.csv", PAYLOAD)
    faults = inject(client, "GetObject", slow_down)
    file = parse_key("s/t/LOAD00000001.csv", len(PAYLOAD))
    # WHEN it is staged / THEN BronzeError names it, the attempts and the code; no copy is left behind
    message = f"Reading s3://{BUCKET}/dms/s/t/LOAD00000001.csv failed after 4 attempt(s): SlowDown (HTTP 503: "
    with pytest.raises(BronzeError, match="^" + re.escape(message)):
        store(client, tmp_path, sleeps).spark_paths([file])
    assert (len(faults.requests), sorted(p.name for p in (tmp_path / "staging/s/t").iterdir())) == (4, [])


def test_persistent_connection_resets_while_listing_name_the_prefix(
    client: Any, tmp_path: Path, sleeps: list[float]
) -> None:
    # GIVEN a listing whose connection is always reset
    inject(client, "ListObjectsV2", connection_reset)
    # WHEN the table folder is listed / THEN BronzeError names the prefix (botocore's exception has no attempts)
    with pytest.raises(BronzeError, match=re.escape(f"Listing s3://{BUCKET}/dms/s/t/ failed: Connection was closed")):
        list_bronze(store(client, tmp_path, sleeps), "s/t")
    assert len(sleeps) == SETTINGS.max_attempts - 1


def test_persistent_throttling_of_a_size_is_an_error_not_a_missing_file(
    client: Any, tmp_path: Path, sleeps: list[float]
) -> None:
    # GIVEN an object whose HeadObject keeps answering 503 (a HEAD answer has no body, so no code)
    put(client, "s/t/LOAD00000001.csv", b"abc")
    inject(client, "HeadObject", error_response(503, "SlowDown", ""))
    # WHEN it is sized / THEN the failure is raised, not reported as "no such object" (None)
    with pytest.raises(BronzeError, match=r"^Reading the size of s3://.*/dms/s/t/LOAD00000001\.csv failed after 4"):
        store(client, tmp_path, sleeps).size("s/t/LOAD00000001.csv")


def test_a_body_that_keeps_breaking_names_the_object_and_byte(client: Any, tmp_path: Path, sleeps: list[float]) -> None:
    # GIVEN an object whose body always breaks 5,000 bytes into each answer
    put(client, "s/t/LOAD00000001.csv", PAYLOAD)
    client.meta.events.register("after-call.s3.GetObject", BodyBreaks(cut=5000, times=10**6))
    file = parse_key("s/t/LOAD00000001.csv", len(PAYLOAD))
    # WHEN it is staged
    # THEN after 3 answers (body_attempts) BronzeError says where it broke; no partial file stays
    with pytest.raises(
        BronzeError,
        match=re.escape(
            f"Reading s3://{BUCKET}/dms/s/t/LOAD00000001.csv failed: the connection broke 3 time(s) mid-object, "
            "last at byte 15000"
        ),
    ):
        store(client, tmp_path, sleeps).spark_paths([file])
    assert list((tmp_path / "staging/s/t").iterdir()) == []


def test_an_object_replaced_since_the_listing_is_an_error(client: Any, tmp_path: Path, sleeps: list[float]) -> None:
    # GIVEN an object listed at 10 bytes that now holds 3
    put(client, "s/t/LOAD00000001.csv", b"abc")
    file = parse_key("s/t/LOAD00000001.csv", 10)
    # WHEN it is staged / THEN BronzeError says it changed, and nothing is staged
    with pytest.raises(BronzeError, match=r"holds 3 bytes, not the 10 it was listed with"):
        store(client, tmp_path, sleeps).spark_paths([file])
    assert not (tmp_path / "staging/s/t/LOAD00000001.csv").exists()


def test_store_settings_make_the_client_config() -> None:
    # GIVEN / WHEN settings make a botocore Config
    config = StoreSettings(retry_mode="adaptive", max_attempts=7, read_timeout_seconds=5).client_config()
    # THEN retries and timeouts are the settings'
    assert (config.retries, config.read_timeout) == ({"mode": "adaptive", "total_max_attempts": 7}, 5)

"""The follow loop's edges: bronze listed after each folder's newest key, batches bounded by bytes,
and S3 events in an SQS FIFO queue read as announcements (moto)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError
from moto import mock_aws

from cdclake.dms.files import parse_key
from cdclake.dms.index import BronzeIndex, in_time_order
from cdclake.dms.notices import QueueNotices, announced_key
from cdclake.dms.s3_bronze import S3Bronze
from cdclake.dms.store import LocalBronze
from cdclake.engine.select import batches

from .conftest import BUCKET


class CountingS3:
    """An S3 client that records the ListObjectsV2 requests it sends (with their StartAfter)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.listed: list[str | None] = []
        client.meta.events.register("before-call.s3.ListObjectsV2", self._seen)

    def _seen(self, params: dict[str, Any], **_: Any) -> None:
        self.listed.append(params.get("query_string", {}).get("start-after"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def put(client: Any, key: str, body: bytes = b"x") -> None:
    client.put_object(Bucket=BUCKET, Key=f"dms/{key}", Body=body)


def test_a_folder_is_listed_after_its_newest_cdc_key_and_still_shows_its_load_files(s3_client: Any) -> None:
    # GIVEN a table folder with a LOAD file and two CDC files, indexed by a full listing
    counting = CountingS3(s3_client)
    for key in ("s/t/LOAD00000001.csv", "s/t/20240301-1200000000.csv", "s/t/20240301-1201000000.csv"):
        put(s3_client, key)
    index = BronzeIndex(S3Bronze(counting, BUCKET, "dms"))
    assert index.relist() == {"s/t/LOAD00000001.csv", "s/t/20240301-1200000000.csv", "s/t/20240301-1201000000.csv"}
    # WHEN a CDC file and a second LOAD file arrive and the folder is looked at
    put(s3_client, "s/t/20240301-1202000000.csv")
    put(s3_client, "s/t/LOAD00000002.csv", b"xyz")
    new = index.look(["s/t"])
    # THEN S3 was asked for what sorts after the newest CDC key only, and both new files are indexed
    assert counting.listed[-1] == "dms/s/t/20240301-1201000000.csv"
    assert new == {"s/t/20240301-1202000000.csv", "s/t/LOAD00000002.csv"}
    assert [f.name for f in index.listing().files] == [
        "LOAD00000001.csv",
        "LOAD00000002.csv",
        "20240301-1200000000.csv",
        "20240301-1201000000.csv",
        "20240301-1202000000.csv",
    ]
    # AND a look that finds nothing new reports nothing, and a LOAD file removed from bronze leaves the index
    s3_client.delete_object(Bucket=BUCKET, Key="dms/s/t/LOAD00000002.csv")
    assert index.look(["s/t"]) == set()
    assert "s/t/LOAD00000002.csv" not in index.files


def test_date_folders_that_do_not_start_with_the_year_are_listed_whole(tmp_path: Path) -> None:
    # GIVEN DDMMYYYY date folders: a newer day's folder sorts before an older one
    keys = ["s/t/28022024/20240228-2359000000.csv", "s/t/01032024/20240301-0001000000.csv"]
    assert not in_time_order(parse_key(keys[0]), "s/t")
    assert in_time_order(parse_key("s/t/2024/02/28/20240228-2359000000.csv"), "s/t")
    for key in keys[:1]:
        (tmp_path / key).parent.mkdir(parents=True)
        (tmp_path / key).write_bytes(b"x")
    index = BronzeIndex(LocalBronze(tmp_path))
    index.relist()
    # WHEN the next day's file arrives in a folder that sorts before the known one
    (tmp_path / keys[1]).parent.mkdir(parents=True)
    (tmp_path / keys[1]).write_bytes(b"x")
    # THEN the folder is listed whole and the file is found (listing after the newest key would miss it)
    assert index.newest_in_order("s/t") is None
    assert index.look(["s/t"]) == {keys[1]}


def test_an_announced_key_no_listing_showed_is_added_with_its_size_and_a_missing_one_is_named(
    tmp_path: Path,
) -> None:
    # GIVEN an index of a folder, and a file that arrived with an older name than the newest known key
    (tmp_path / "s/t").mkdir(parents=True)
    (tmp_path / "s/t/20240301-1205000000.csv").write_bytes(b"x")
    index = BronzeIndex(LocalBronze(tmp_path))
    index.relist()
    (tmp_path / "s/t/20240301-1200000000.csv").write_bytes(b"late")
    assert index.look(["s/t"]) == set()  # listing after the newest key cannot see it
    # WHEN its event names it (and another event names a file deleted since, and one a stray key)
    new, missing = index.announce(["s/t/20240301-1200000000.csv", "s/t/20240301-1100000000.csv", "s/t/x.txt"])
    # THEN the late file is in the index with its size; the deleted one is named missing
    assert new == {"s/t/20240301-1200000000.csv"}
    assert index.files["s/t/20240301-1200000000.csv"].size == 4
    assert missing == {"s/t/20240301-1100000000.csv"}


def test_batches_are_bounded_by_files_and_bytes_and_a_large_file_goes_alone() -> None:
    files = [parse_key(f"s/t/20240301-12000{i:05d}.csv", size) for i, size in enumerate([40, 40, 40, 200, 10, 10])]
    cut = batches(files, 3, max_bytes=100)
    assert [[f.size for f in batch] for batch in cut] == [[40, 40], [40], [200], [10, 10]]
    assert [len(b) for b in batches(files, 2)] == [2, 2, 2]


# --------------------------------------------------------------------------- the file queue


def event(key: str, bucket: str = BUCKET) -> str:
    return json.dumps(
        {
            "detail-type": "Object Created",
            "source": "aws.s3",
            "detail": {"bucket": {"name": bucket}, "object": {"key": key, "size": 1}},
        }
    )


def test_an_event_names_a_key_relative_to_the_bronze_prefix_or_nothing() -> None:
    assert announced_key(event("dms/s/t/20240301-1200000000.csv"), BUCKET, "dms") == "s/t/20240301-1200000000.csv"
    assert (
        announced_key(event("dms/s/my%20t/20240301-1200000000.csv"), BUCKET, "dms") == "s/my t/20240301-1200000000.csv"
    )
    assert announced_key(event("other/s/t/x.csv"), BUCKET, "dms") is None
    assert announced_key(event("dms/s/t/x.csv", "another-bucket"), BUCKET, "dms") is None
    assert announced_key("not json", BUCKET, "dms") is None


@pytest.fixture
def fifo(aws_credentials: None) -> Any:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(
            QueueName="files.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
        )["QueueUrl"]
        yield sqs, url


def counts(sqs: Any, url: str) -> tuple[int, int]:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


class RecordingSqs:
    """A moto SQS client that records every call it is sent, and loses the answers of the next
    ``lose`` receives (SQS handled the request; the answer never came back: a read timeout)."""

    def __init__(self, client: Any, lose: int = 0) -> None:
        self.client = client
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.lose = lose

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def call(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            answer = method(**kwargs)
            if name == "receive_message" and self.lose:
                self.lose -= 1
                raise ReadTimeoutError(endpoint_url="https://sqs.us-east-1.amazonaws.com/")
            return answer

        return call

    def attempt_ids(self) -> list[str | None]:
        return [kwargs.get("ReceiveRequestAttemptId") for name, kwargs in self.calls if name == "receive_message"]

    def made_visible_again(self) -> list[tuple[str, dict[str, Any]]]:
        """Calls that end a message's invisibility early (each such receive counts toward maxReceiveCount)."""
        return [
            (name, kwargs)
            for name, kwargs in self.calls
            if name.startswith("change_message_visibility") or kwargs.get("VisibilityTimeout") == 0
        ]


def test_each_event_is_deleted_once_its_key_is_noted_and_none_is_ever_made_visible_again(fifo: Any) -> None:
    # GIVEN 25 events in one message group; the loop can index every key but the last three's
    # (reading bronze fails for them)
    sqs, url = fifo
    recording = RecordingSqs(sqs)
    keys = [f"s/t/20240301-12{i:08d}.csv" for i in range(25)]
    for key in keys:
        sqs.send_message(QueueUrl=url, MessageBody=event(f"dms/{key}"), MessageGroupId="dms")
    notices = QueueNotices(recording, url, BUCKET, "dms")
    indexed: set[str] = set()

    def note(key: str) -> bool:
        if key not in keys[22:]:
            indexed.add(key)
        return key in indexed

    # WHEN the loop waits for announcements
    announced = notices.wait(time.monotonic() + 2, threading.Event(), note)
    # THEN every key was handed on, and each noted one's event deleted at once, so the FIFO window
    # of 10 moved on past them within the wait; the three unindexed stay in flight
    assert announced == set(keys) and indexed == set(keys[:22])
    assert notices.deleted == 22 and counts(sqs, url) == (0, 3)
    # WHEN the loop settles without having indexed them
    assert notices.settle(lambda k: k in indexed) == 0
    # THEN they stay in flight (they come back when their visibility ends): none is made visible
    # again, which would count one more receive toward the dead-letter queue every round
    assert counts(sqs, url) == (0, 3)
    # WHEN they are indexed after all and the loop settles THEN they are deleted
    indexed |= set(keys[22:])
    assert notices.settle(lambda k: k in indexed) == 3 and counts(sqs, url) == (0, 0)
    assert recording.made_visible_again() == []
    assert all(kwargs["VisibilityTimeout"] > 0 for name, kwargs in recording.calls if name == "receive_message")


def test_a_receive_whose_answer_was_lost_is_sent_again_with_the_same_attempt_id(fifo: Any) -> None:
    # GIVEN two queued events and a receive whose answer will be lost (SQS took the messages in flight)
    sqs, url = fifo
    for key in ("s/t/20240301-1200000001.csv", "s/t/20240301-1200000002.csv"):
        sqs.send_message(QueueUrl=url, MessageBody=event(f"dms/{key}"), MessageGroupId="dms")
    recording = RecordingSqs(sqs, lose=1)
    notices = QueueNotices(recording, url, BUCKET, "dms", receive_backoff_seconds=0.0)
    # WHEN the loop waits
    notices.wait(time.monotonic(), threading.Event(), lambda k: True)
    notices.wait(time.monotonic(), threading.Event(), lambda k: True)
    # THEN every receive carried an attempt id; the retry of the lost one carried the same (AWS then
    # answers with the same two messages: moto ignores the id, so here they stay in flight), and the
    # receive after a successful one carried a new one
    ids = recording.attempt_ids()
    assert len(ids) == 3 and all(ids)
    assert ids[1] == ids[0] and ids[2] != ids[1]
    # WHEN every attempt of a receive fails THEN the error is raised, and the next wait repeats that
    # receive with its attempt id
    recording.lose = notices.receive_attempts
    with pytest.raises(ReadTimeoutError):
        notices.wait(time.monotonic() + 1, threading.Event(), lambda k: True)
    failed = recording.attempt_ids()[-notices.receive_attempts :]
    assert len(set(failed)) == 1 and failed[0] not in ids
    notices.wait(time.monotonic(), threading.Event(), lambda k: True)
    assert recording.attempt_ids()[-1] == failed[0]
    assert recording.made_visible_again() == []


def test_applied_files_are_forgotten_but_each_folders_newest_stays_so_the_next_look_starts_after_it(
    tmp_path: Path,
) -> None:
    # GIVEN a folder with three CDC files, the first two applied, and a LOAD file
    keys = [f"s/t/20240301-120{i}000000.csv" for i in range(3)]
    for key in [*keys, "s/t/LOAD00000001.csv"]:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(b"x")
    index = BronzeIndex(LocalBronze(tmp_path))
    index.relist()
    # WHEN the applied ones are forgotten (all three count as applied here)
    assert index.forget_applied(lambda f: True) == 2
    # THEN the newest CDC key and the LOAD file stay, and a look still starts after the newest
    assert sorted(index.files) == ["s/t/20240301-1202000000.csv", "s/t/LOAD00000001.csv"]
    assert index.newest_in_order("s/t") == keys[2]
    assert index.look(["s/t"]) == set()


def test_a_load_file_written_again_in_place_with_the_same_size_is_new_to_the_index(
    s3_client: Any, tmp_path: Path
) -> None:
    # GIVEN a table folder with a LOAD file and a CDC file, indexed, on S3 and on a local disk
    local = tmp_path / "bronze"
    (local / "s" / "t").mkdir(parents=True)
    for key, body in (("s/t/LOAD00000001.csv", b"1,a"), ("s/t/20240301-1200000000.csv", b"I,1,b")):
        put(s3_client, key, body)
        (local / key).write_bytes(body)
    indexes = [BronzeIndex(S3Bronze(s3_client, BUCKET, "dms")), BronzeIndex(LocalBronze(local))]
    assert all(len(index.relist()) == 2 for index in indexes)
    # WHEN the LOAD file is written again with other rows of the same size (a reload, or capture's
    # "start from scratch"): on S3 a new ETag, locally a new modification time
    put(s3_client, "s/t/LOAD00000001.csv", b"2,c")
    (local / "s/t/LOAD00000001.csv").write_bytes(b"2,c")
    stat = (local / "s/t/LOAD00000001.csv").stat()
    os.utime(local / "s/t/LOAD00000001.csv", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    # THEN a look at the folder and a full listing both show it as new, with its new version
    for index in indexes:
        old = index.files["s/t/LOAD00000001.csv"].version
        assert index.look(["s/t"]) == {"s/t/LOAD00000001.csv"}
        assert index.files["s/t/LOAD00000001.csv"].version not in (None, old)
        assert index.relist() == set()  # the look already took the new version

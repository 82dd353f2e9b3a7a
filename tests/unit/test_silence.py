"""``engine.silence``: a table that goes silent (no CDC file for longer than its cadence, or a DMS table error)
is alerted once per silence, and once when it speaks again; the follow loop looks with what it holds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from cdclake.config import ConfigError, parse_config
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile, parse_key
from cdclake.dms.notices import Polling
from cdclake.dms.store import LocalBronze
from cdclake.dms.writer import write_csv
from cdclake.engine.follow import Follower, FollowSettings
from cdclake.engine.silence import Silence, SilenceWatch, expected_gap, silent_tables, write_time
from cdclake.shells.glue_job import parse_arguments
from file_modules import module_at

from .conftest import BUCKET
from .test_follower import Rounds

CONFIG = parse_config(
    "tables:\n"
    "  s.busy: {primary_key: [id], columns: {id: int}}\n"
    "  s.fixed: {primary_key: [id], columns: {id: int}, silent_after_minutes: 30}\n"
    "  s.rare: {primary_key: [id], columns: {id: int}, silent_after_minutes: 0}\n",
    "test",
)
BUSY, FIXED, RARE = CONFIG.tables
T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


class Inbox:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def send(self, subject: str, message: str) -> None:
        self.sent.append((subject, message))


def _every(minutes: float, count: int, start: datetime = T0) -> list[datetime]:
    return [start + timedelta(minutes=minutes * n) for n in range(count)]


def _file(table: str, at: datetime) -> BronzeFile:
    return parse_key(f"s/{table}/{at:%Y%m%d-%H%M%S%f}"[:-3] + ".csv")


def _writing(at: datetime) -> list[BronzeFile]:
    """A file of a table that keeps writing (the task runs), written at ``at``."""
    return [_file("other", at)]


def test_a_cdc_file_name_is_its_write_time_and_a_load_file_has_none() -> None:
    assert write_time(parse_key("s/busy/20240301-120501250.csv")) == datetime(2024, 3, 1, 12, 5, 1, 250000, UTC)
    assert write_time(parse_key("s/busy/2024/03/01/20240301-120501250.csv")) == datetime(
        2024, 3, 1, 12, 5, 1, 250000, UTC
    )
    assert write_time(parse_key("s/busy/LOAD00000001.csv")) is None


def test_the_cadence_is_six_times_the_p90_gap_at_least_the_floor_and_needs_history() -> None:
    # GIVEN a table that wrote a file every 10 minutes, one every minute, and one with 11 gaps only
    assert expected_gap(_every(10, 20)) == timedelta(minutes=60)
    assert expected_gap(_every(1, 20)) == timedelta(minutes=15)  # the floor
    assert expected_gap(_every(10, 12)) is None  # 11 gaps: not judged yet
    # AND an outlier gap below the 90th percentile does not widen it
    times = [*_every(2, 30), T0 + timedelta(minutes=58 + 120)]
    assert expected_gap(times) == timedelta(minutes=15)


def test_a_table_is_silent_after_its_cadence_and_off_when_set_to_zero() -> None:
    # GIVEN three tables whose newest file is 40 minutes old (busy wrote one every minute), while another
    # table of the task writes on
    newest = T0 + timedelta(minutes=19)
    times = {t.source: _every(1, 20) for t in (BUSY, FIXED, RARE)}

    def judged(after: timedelta) -> list[Silence]:
        now = newest + after
        return silent_tables(CONFIG.tables, {**times, "s.other": [now]}, {}, now)

    # WHEN judged 40 minutes after the newest file
    found = judged(timedelta(minutes=40))
    # THEN busy (derived: 15 min) and fixed (30 min) are silent, rare (0: off) is not
    assert [s.table for s in found] == ["s.busy", "s.fixed"]
    assert "no CDC file for 40 min (it is expected at least every 15 min)" in found[0].why
    # AND 20 minutes after it only busy is
    assert [s.table for s in judged(timedelta(minutes=20))] == ["s.busy"]


def test_no_table_is_silent_by_its_files_when_every_table_is_quiet() -> None:
    # GIVEN the same tables, and no other table writing: the task stopped, or the source is quiet (a night)
    times = {t.source: _every(1, 20) for t in CONFIG.tables}
    # WHEN judged hours later
    found = silent_tables(CONFIG.tables, times, {}, T0 + timedelta(hours=9))
    # THEN none is alerted by its files (the DMS task rule and the freshness alarm hear that)
    assert found == []


def test_a_dms_table_error_is_silence_whatever_the_files_say() -> None:
    # GIVEN fresh files for every table, and DMS reporting a failed state for two (rare's 0 turns off only
    # the judgement by files: DMS saying it stopped capturing the table is always heard)
    times = {t.source: _every(1, 20) for t in CONFIG.tables}
    states = {"s.fixed": "Table error", "s.rare": "Table cancelled", "s.busy": "Table completed"}
    found = silent_tables(CONFIG.tables, times, states, T0 + timedelta(minutes=20))
    assert [(s.table, "Table error" in s.why or "Table cancelled" in s.why) for s in found] == [
        ("s.fixed", True),
        ("s.rare", True),
    ]


def test_a_table_with_no_cdc_file_yet_is_not_judged_by_its_files() -> None:
    assert silent_tables([FIXED], {}, {}, T0 + timedelta(days=3)) == []


def test_the_watch_alerts_once_per_silence_and_once_when_the_table_speaks_again() -> None:
    # GIVEN a watch over the fixed-cadence table (30 min)
    inbox = Inbox()
    watch = SilenceWatch([FIXED], inbox)
    files = [_file("fixed", t) for t in _every(1, 5)]
    quiet = T0 + timedelta(minutes=4)
    # WHEN it looks (another table writing each time) before the cadence, three times after it, then after a
    # new file came
    for minutes in (10, 31, 45, 90):
        watch.look(files + _writing(quiet + timedelta(minutes=minutes)), quiet + timedelta(minutes=minutes), 0.0)
    later = quiet + timedelta(minutes=100)
    files.append(_file("fixed", later))
    watch.look(files + _writing(later), later + timedelta(minutes=1), 0.0)
    watch.look(files + _writing(later), later + timedelta(minutes=2), 0.0)
    # THEN one alert when it went silent, naming the table, and one when it spoke again
    assert [subject for subject, _ in inbox.sent] == ["table s.fixed is silent", "table s.fixed speaks again"]
    assert "s.fixed: no CDC file for 31 min" in inbox.sent[0][1]


def test_a_silence_alerted_by_an_earlier_run_is_not_alerted_again_and_its_end_is() -> None:
    # GIVEN a watch that starts with what an earlier run recorded (s.fixed alerted) and records its changes
    recorded: list[frozenset[str]] = []
    inbox = Inbox()
    watch = SilenceWatch([FIXED], inbox, alerted={"s.fixed", "s.gone"}, remember=recorded.append)
    stale = [parse_key("s/fixed/20240301-120000000.csv")]
    # WHEN it looks while the table is still silent, then after it wrote again
    watch.look(stale + _writing(T0 + timedelta(hours=2)), T0 + timedelta(hours=2), 0.0)
    fresh = [*stale, parse_key("s/fixed/20240301-140000000.csv")]
    watch.look(fresh, T0 + timedelta(hours=2, minutes=1), 0.0)
    # THEN no second "silent" alert, one "speaks again"; a table no longer configured leaves the record quietly
    assert [subject for subject, _ in inbox.sent] == ["table s.fixed speaks again"]
    assert recorded == [frozenset({"s.fixed"}), frozenset()]  # the first look records what it found


def test_the_watch_judges_by_files_when_dms_cannot_be_read() -> None:
    def unreadable() -> dict[str, str]:
        raise RuntimeError("AccessDenied")

    inbox = Inbox()
    watch = SilenceWatch([FIXED], inbox, unreadable)
    files = [parse_key("s/fixed/20240301-120000000.csv"), *_writing(T0 + timedelta(hours=2))]
    assert [s.table for s in watch.look(files, T0 + timedelta(hours=2), 0.0)] == ["s.fixed"]


def test_the_watch_looks_at_most_every_interval() -> None:
    watch = SilenceWatch([FIXED], Inbox(), every_seconds=300.0)
    assert watch.due(0.0)
    watch.look([], T0, 100.0)
    assert not watch.due(399.0) and watch.due(400.0)


def test_silent_after_minutes_is_a_whole_number_of_minutes() -> None:
    with pytest.raises(ConfigError, match=r"silent_after_minutes must be an integer >= 0"):
        parse_config("tables:\n  s.a: {primary_key: [id], columns: {id: int}, silent_after_minutes: soon}\n", "t")


def test_the_follow_loop_alerts_a_table_that_went_silent_while_another_keeps_writing(tmp_path: Path) -> None:
    # GIVEN bronze where s.fixed wrote its last file two hours ago and s.busy writes now
    config = parse_config(
        "tables:\n"
        "  s.busy: {primary_key: [id], columns: {id: int}, silent_after_minutes: 30}\n"
        "  s.fixed: {primary_key: [id], columns: {id: int}, silent_after_minutes: 30}\n",
        "test",
    )
    now = datetime.now(UTC)
    for table, at in (("busy", now - timedelta(minutes=1)), ("fixed", now - timedelta(hours=2))):
        write_csv(tmp_path / "s" / table / (f"{at:%Y%m%d-%H%M%S%f}"[:-3] + ".csv"), [["I", "1"]])
    inbox = Inbox()
    engine = Engine(spark=None, config=config, store=LocalBronze(tmp_path))  # type: ignore[arg-type]
    follower = Follower(engine, FollowSettings(poll_seconds=0.0), Polling(), None, inbox, Rounds())
    follower.index.relist()
    # WHEN two rounds run
    rounds: list[tuple[str, ...]] = []
    follower.round(follower.selected, lambda done: rounds.append(done.silent))
    follower.silence.last_look = None  # the next round looks again (the watch looks every 5 minutes)
    follower.round(follower.selected, lambda done: rounds.append(done.silent))
    # THEN each round reports s.fixed silent, and it was alerted once
    assert rounds == [("s.fixed",), ("s.fixed",)]
    assert [subject for subject, _ in inbox.sent] == ["table s.fixed is silent"]


# ------------------------------------------------------------------------------------- the CDC job's edges


def _cdc_job() -> Any:
    return module_at(Path(__file__).resolve().parents[2] / "glue" / "jobs" / "cdc.py", "glue_job_cdc_silence")


def test_the_cdc_job_reads_each_tables_dms_state_across_its_tasks_page_by_page() -> None:
    # GIVEN two tasks, the first answering in two pages (moto has no DescribeTableStatistics: botocore's Stubber
    # answers with the API's own response shape, and fails the test on any other call)
    dms = boto3.client("dms", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(dms)
    first, second = "arn:aws:dms:us-east-1:123456789012:task:A", "arn:aws:dms:us-east-1:123456789012:task:B"
    stub.add_response(
        "describe_table_statistics",
        {"TableStatistics": [{"SchemaName": "s", "TableName": "a", "TableState": "Table completed"}], "Marker": "m"},
        {"ReplicationTaskArn": first},
    )
    stub.add_response(
        "describe_table_statistics",
        {"TableStatistics": [{"SchemaName": "s", "TableName": "b", "TableState": "Table error"}]},
        {"ReplicationTaskArn": first, "Marker": "m"},
    )
    stub.add_response(
        "describe_table_statistics",
        {"TableStatistics": [{"SchemaName": "t", "TableName": "c", "TableState": "Table cancelled"}]},
        {"ReplicationTaskArn": second},
    )
    # WHEN the job's reader reads them
    with stub:
        read = _cdc_job().dms_table_states([first, second], dms)
        assert read is not None
        states = read()
        stub.assert_no_pending_responses()
    # THEN every table of every task, by schema.table
    assert states == {"s.a": "Table completed", "s.b": "Table error", "t.c": "Table cancelled"}
    assert _cdc_job().dms_table_states([]) is None


def test_the_cdc_job_records_the_silent_tables_and_a_next_run_starts_from_them(s3_client: Any) -> None:
    # GIVEN the job's arguments naming where the silent tables are recorded (nothing recorded yet)
    job = _cdc_job()
    uri = f"s3://{BUCKET}/state/silent.json"
    args = parse_arguments(
        ["cdc.py", "--config", "c", "--bronze", "b", "--warehouse", "w", "--silent_tables", uri], "cdc"
    )
    edges = job.silence_edges(args)
    assert edges.alerted == frozenset() and edges.dms_states is None
    # WHEN a watch alerts a table and records it, and the next run reads the record
    inbox = Inbox()
    watch = edges.watch([FIXED], inbox)
    stale = parse_key("s/fixed/20240301-120000000.csv")
    watch.look([stale, *_writing(T0 + timedelta(hours=2))], T0 + timedelta(hours=2), 0.0)
    again = job.silence_edges(args).watch([FIXED], inbox)
    again.look([stale, *_writing(T0 + timedelta(hours=3))], T0 + timedelta(hours=3), 0.0)
    # THEN the table was alerted once in all, and the record holds it
    assert [subject for subject, _ in inbox.sent] == ["table s.fixed is silent"]
    assert json.loads(s3_client.get_object(Bucket=BUCKET, Key="state/silent.json")["Body"].read()) == ["s.fixed"]


def test_the_watch_keeps_the_history_the_loops_index_forgets() -> None:
    # GIVEN a table that wrote a file a minute for 20 minutes, seen one file at a time (the follow loop's index
    # forgets applied files but each folder's newest), while another table keeps writing
    inbox = Inbox()
    watch = SilenceWatch([BUSY], inbox)
    times = _every(1, 20)
    for at in times:
        watch.look([_file("busy", at), *_writing(at)], at, 0.0)
    # WHEN only its newest file is left to see, 16 minutes after it
    later = times[-1] + timedelta(minutes=16)
    found = watch.look([_file("busy", times[-1]), *_writing(later)], later, 0.0)
    # THEN its cadence was derived from all it saw (15 minutes: the floor), so it is silent
    assert [s.table for s in found] == ["s.busy"]

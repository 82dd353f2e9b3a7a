"""The follow loop (``run --follow``, the Glue CDC job): files applied as they arrive, each once,
checked against a plain-Python replay of the change log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3

from cdclake.context import Engine
from cdclake.dms.notices import Polling, QueueNotices
from cdclake.dms.s3_bronze import S3Bronze
from cdclake.dms.writer import SourceChange, cdc_file_name, cdc_records, write_csv
from cdclake.engine.follow import FollowSettings, follow
from cdclake.lake.committer import IcebergCommitter
from cdclake.lake.ledger import read_ledger
from cdclake.report import Round
from oracle import replay_change_log

EngineFactory = Callable[..., Engine]
TABLES = ("alpha", "beta", "gamma")
CONFIG = """
bronze: {timestamp_column: ts}
cdc: {parallel_tables: 3}
tables:
""" + "".join(f"  s.{t}: {{primary_key: [id], columns: {{id: int, name: string}}}}\n" for t in TABLES)
LOAD_TS = "2024-01-01 00:00:00.000000"
INITIAL = [{"id": str(i), "name": f"n{i}", "ts": LOAD_TS} for i in range(1, 4)]


class Source:
    """Writes DMS files for the tables and keeps each table's change log for the oracle."""

    def __init__(self, bronze: Path) -> None:
        self.bronze = bronze
        self.log: dict[str, list[SourceChange]] = {t: [] for t in TABLES}
        self.second = 0
        for table in TABLES:
            rows = [[LOAD_TS, r["id"], r["name"]] for r in INITIAL]
            write_csv(bronze / "s" / table / "LOAD00000001.csv", rows)

    def cdc_file(self, table: str, changes: list[tuple[str, int, str]]) -> Path:
        written = []
        for op, ident, name in changes:
            self.second += 1
            ts = f"2024-01-02 00:{self.second // 60:02d}:{self.second % 60:02d}.000000"
            written.append(SourceChange(op, {"id": str(ident), "name": name, "ts": ts}, ts, ""))
        self.log[table] += written
        path = self.bronze / "s" / table / cdc_file_name(written[-1].commit_ts)
        records = cdc_records(written, ["id", "name"], with_timestamp=True, with_seq=False)
        # Written whole beside bronze, then renamed into it: DMS's upload is atomic too (a partial file in the
        # table's folder could be listed, and be gone by the time it is read)
        part = self.bronze.parent / "staging" / f"{table}-{path.name}.part"
        write_csv(part, records)
        part.rename(path)
        return path

    def expected(self, table: str) -> dict[tuple[str, ...], dict[str, Any]]:
        return replay_change_log(INITIAL, self.log[table], ["id"])


def silver(engine: Engine, table: str) -> dict[tuple[str, ...], dict[str, Any]]:
    rows = engine.spark.table(f"silver.{engine.config.database}.{table}").collect()
    return {(str(r["id"]),): {"id": str(r["id"]), "name": r["name"], "ts": r["ts"]} for r in rows}


def test_files_that_arrive_while_following_are_applied_once_each_then_the_loop_ends_idle(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN three tables' full loads and a first CDC file in bronze
    engine = make_engine(CONFIG)
    source = Source(tmp_path / "bronze")
    source.cdc_file("alpha", [("U", 1, "a1"), ("I", 9, "a9")])
    rounds: list[Round] = []
    applied_rounds = threading.Semaphore(0)

    def each_round(done: Round) -> None:
        rounds.append(done)
        if any(t.files_applied for t in done.report.tables):
            applied_rounds.release()

    # WHEN the loop follows bronze while files keep arriving, each after the last was applied
    def arrive() -> None:
        for step in range(4):
            assert applied_rounds.acquire(timeout=60)
            source.cdc_file(TABLES[step % 3], [("U", 2, f"x{step}"), ("D", 3, "")])
            source.cdc_file("beta", [("I", 10 + step, f"b{step}")])

    writer = threading.Thread(target=arrive)
    writer.start()
    outcome = follow(engine, FollowSettings(poll_seconds=0.3, idle_seconds=4.0), Polling(), on_round=each_round)
    writer.join()
    # THEN it ended idle, having applied every file in several rounds, and each table equals the replay
    assert outcome.stopped_by == "idle" and outcome.failures == {}
    # the first files, then each of the writer's four steps after an applied round (a step's two files
    # may land in two rounds)
    assert sum(1 for r in rounds if any(t.files_applied for t in r.report.tables)) >= 5
    for table in TABLES:
        assert silver(engine, table) == source.expected(table), table
    # AND each CDC file is in the ledger once (the load's file too), with no backlog left
    files = sorted((tmp_path / "bronze").rglob("*.csv"))
    applied = set()
    for table in TABLES:
        applied |= read_ledger(engine.spark, engine.silver_table(engine.config.table(table)), whole=True).applied.keys
    assert applied == {f.relative_to(tmp_path / "bronze").as_posix() for f in files}
    assert outcome.files_applied == len(files) and rounds[-1].backlog.files == 0


def test_a_load_file_written_again_in_place_while_following_reloads_its_table(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a followed table with its full load and a CDC file applied
    engine = make_engine(CONFIG)
    source = Source(tmp_path / "bronze")
    source.cdc_file("alpha", [("U", 1, "a1")])
    load = tmp_path / "bronze" / "s" / "alpha" / "LOAD00000001.csv"
    reloaded = [["2024-01-03 00:00:00.000000", str(i), f"r{i}"] for i in range(1, 4)]
    rounds: list[Round] = []

    def each_round(done: Round) -> None:
        rounds.append(done)
        if len(rounds) == 1:
            # WHEN the table is reloaded at the source: its LOAD file written again in place, with
            # other rows of the same size (a DMS "Reload table data", capture --reload)
            before = load.stat()
            write_csv(load, reloaded)
            assert load.stat().st_size == before.st_size
            os.utime(load, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))

    outcome = follow(engine, FollowSettings(poll_seconds=0.3, idle_seconds=3.0), Polling(), on_round=each_round)
    # THEN the loop loaded the table again: silver holds the reloaded rows (the CDC file before it is superseded)
    assert outcome.failures == {}
    assert {k: v["name"] for k, v in silver(engine, "alpha").items()} == {(str(i),): f"r{i}" for i in range(1, 4)}


class FailingFor(IcebergCommitter):
    """Fails every data commit of one table until ``healed`` is set."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.healed = threading.Event()
        self.failures = 0

    def _fault(self, batch: Any) -> None:
        if batch.table.name == self.table and not self.healed.is_set():
            self.failures += 1
            raise RuntimeError(f"simulated fault in {self.table}")

    def merge(self, spark: Any, batch: Any, statement: Any) -> Any:
        self._fault(batch)
        return super().merge(spark, batch, statement)

    def publish(self, spark: Any, batch: Any) -> Any:
        self._fault(batch)
        return super().publish(spark, batch)

    def row_delta(self, spark: Any, batch: Any, before_commit: Any = None) -> Any:
        self._fault(batch)
        return super().row_delta(spark, batch, before_commit)

    def driver_row_delta(self, spark: Any, batch: Any, before_commit: Any = None) -> Any:
        self._fault(batch)
        return super().driver_row_delta(spark, batch, before_commit)


def test_a_failing_table_is_tried_again_with_backoff_while_the_others_go_on(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a table whose commits fail until healed, and files for every table
    committer = FailingFor("gamma")
    engine = replace(make_engine(CONFIG), committer=committer)
    source = Source(tmp_path / "bronze")
    for table in TABLES:
        source.cdc_file(table, [("U", 1, f"{table}-1")])
    failing_rounds: list[int] = []

    def each_round(done: Round) -> None:
        if any(f.table == "s.gamma" for f in done.report.failures):
            failing_rounds.append(done.number)
        if len(failing_rounds) == 3:
            committer.healed.set()  # fixed after its third failure
        if done.number == 2:
            source.cdc_file("alpha", [("U", 2, "alpha-2")])

    # WHEN the loop follows until idle
    outcome = follow(engine, FollowSettings(poll_seconds=0.2, idle_seconds=5.0), Polling(), on_round=each_round)
    # THEN the others went on at once; gamma was tried again after growing pauses, then applied
    assert outcome.failures == {} and committer.failures == 3
    assert failing_rounds[0] == 1 and failing_rounds[2] - failing_rounds[1] >= failing_rounds[1] - failing_rounds[0]
    for table in TABLES:
        assert silver(engine, table) == source.expected(table), table


def test_run_follow_applies_files_as_they_arrive_and_ctrl_c_ends_it_with_130(tmp_path: Path) -> None:
    # GIVEN a configuration and a full load in bronze
    (tmp_path / "cdclake.yaml").write_text(CONFIG.replace("bronze: {", "bronze: {path: bronze, "))
    source = Source(tmp_path / "bronze")
    command = [sys.executable, "-m", "cdclake.shells.cli", "--config", str(tmp_path / "cdclake.yaml"), "-q"]
    command += ["run", "--follow", "--poll-interval", "0.5"]
    follower = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    watchdog = threading.Timer(240, follower.kill)  # a follower that never prints what is awaited fails, not hangs
    watchdog.start()
    try:
        # WHEN files arrive after the full loads, and the user presses Ctrl-C once they are applied
        out: list[str] = []
        assert follower.stdout is not None
        while sum("full-load" in line for line in out) != 3:
            out.append(follower.stdout.readline())
            assert follower.poll() is None, follower.stderr.read() if follower.stderr else ""
        source.cdc_file("beta", [("U", 1, "b1"), ("I", 7, "b7")])
        while not any(line.startswith("cdc       s.beta: files=1") for line in out):
            out.append(follower.stdout.readline())
        follower.send_signal(signal.SIGINT)
        _, stderr = follower.communicate(timeout=120)
    finally:
        watchdog.cancel()
        follower.kill()
    # THEN it stopped with 130 and the promise that nothing is lost
    assert follower.returncode == 130, stderr
    assert "cdclake: interrupted; nothing is lost, run it again" in stderr
    assert "inserted=1 updated=1" in "".join(out)


def test_on_aws_the_queue_wakes_the_loop_every_event_is_deleted_and_a_file_without_one_is_applied(
    make_engine: EngineFactory, tmp_path: Path, aws: None
) -> None:
    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    s3.create_bucket(Bucket="bronze")
    queue = sqs.create_queue(
        QueueName="files.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    # GIVEN DMS's files written locally and uploaded: an event for each CDC file (one twice), but
    # none for one file (a dropped event)
    source = Source(tmp_path / "local")
    source.cdc_file("alpha", [("U", 1, "a1")])
    source.cdc_file("beta", [("D", 2, "")])
    lost = source.cdc_file("gamma", [("I", 8, "g8")])
    source.cdc_file("alpha", [("U", 3, "a3")])

    def upload() -> None:
        for path in sorted((tmp_path / "local").rglob("*.csv")):
            key = f"dms/{path.relative_to(tmp_path / 'local').as_posix()}"
            if s3.list_objects_v2(Bucket="bronze", Prefix=key).get("KeyCount"):
                continue
            s3.put_object(Bucket="bronze", Key=key, Body=path.read_bytes())
            if path != lost and "LOAD" not in path.name:
                for _ in range(2 if "beta" in key else 1):
                    body = json.dumps({"detail": {"bucket": {"name": "bronze"}, "object": {"key": key}}})
                    sqs.send_message(
                        QueueUrl=queue,
                        MessageBody=body,
                        MessageGroupId="dms",
                        MessageDeduplicationId=uuid.uuid4().hex,
                    )

    upload()
    store = S3Bronze(s3, "bronze", "dms", staging_dir=tmp_path / "staging")
    engine = make_engine(CONFIG, store=store)
    notices = QueueNotices(sqs, queue, "bronze", "dms")

    # WHEN the job's loop follows the queue, and one more file arrives (with its event) mid-way
    def each_round(done: Round) -> None:
        if done.number == 1:
            source.cdc_file("beta", [("U", 1, "b1")])
            upload()

    outcome = follow(engine, FollowSettings(poll_seconds=0.5, idle_seconds=3.0), notices, on_round=each_round)
    # THEN every table equals the replay, the file without an event included, and the queue is empty
    assert outcome.stopped_by == "idle" and outcome.failures == {}
    for table in TABLES:
        assert silver(engine, table) == source.expected(table), table
    attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]) == (
        "0",
        "0",
    )
    assert notices.deleted == 6  # one per file with an event, the two beta files' twice

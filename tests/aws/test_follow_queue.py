"""The follow loop and the file queue (events never cycle), against moto S3 and an SQS FIFO queue
with the template's redrive policy: the real loop (``engine.follow``) and ``QueueNotices``, with its rounds
(``run.apply_pending``) replaced by a Spark-free fake that applies, fails or quarantines files.

What moto cannot show (RUNTIME_NOTES.md): moto counts receives and dead-letters at ``maxReceiveCount`` as SQS
does, and holds a message group while a message of it is in flight; it ignores ``ReceiveRequestAttemptId``.
"""

from __future__ import annotations

import json
import runpy
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from conftest import MAX_RECEIVE_COUNT, ROOT
from moto import mock_aws
from work import WorkCheckSettings, check_work

import cdclake.engine.follow as follow_module
from cdclake.alerts import LoggedAlerts, SnsAlerts
from cdclake.config import TableConfig, parse_config
from cdclake.context import Engine
from cdclake.dms.files import BronzeListing, FileKind
from cdclake.dms.notices import Polling, QueueNotices
from cdclake.dms.s3_bronze import S3Bronze
from cdclake.dms.store import LocalBronze
from cdclake.engine.follow import FollowSettings, follow
from cdclake.engine.select import TableState
from cdclake.errors import BronzeError, TablesFailedError
from cdclake.ops.failure_episodes import S3Episodes
from cdclake.report import FollowReport, Outcome, Round, RunReport, TableFailure, TableReport
from cdclake.shells.glue_job import CdcArguments, JobArguments
from s3_events import object_created_event

BUCKET = "bronze"
CDC_JOB = "cdclake-test-cdc"
FAILING = "s.t0"
TABLES = [f"s.t{i}" for i in range(11)]  # s.t0 fails, the 10 others are healthy
CONFIG = parse_config(
    "tables:\n" + "".join(f"  {t}: {{primary_key: [id], columns: {{id: int}}}}\n" for t in TABLES), "test"
)


class FakeRounds:
    """``run.apply_pending`` without Spark: each due table's pending CDC files are applied in one batch, except
    in a failing table (a fault, every round it is tried) and files to quarantine (held, with a reason)."""

    def __init__(self, failing: Sequence[str] = (), quarantine: dict[str, str] | None = None) -> None:
        self.failing = set(failing)
        self.quarantine = quarantine or {}  # key -> reason
        self.applied: dict[str, set[str]] = {}
        self.held: dict[str, set[str]] = {}
        self.rounds = 0
        self.applied_in: dict[str, int] = {}  # key -> the round that applied it
        self.tried: dict[str, int] = {}  # source -> rounds it was due in
        self.crash_in: int | None = None  # the round that raises (the loop's own fault, not a table's)
        self.loads_due: set[str] = set()  # tables whose (re)load is due: reported, their CDC held, no state

    def __call__(
        self,
        engine: Engine,
        listing: BronzeListing,
        tables: Sequence[TableConfig],
        states: Mapping[str, TableState],
    ) -> tuple[RunReport, dict[str, TableState]]:
        self.rounds += 1
        if self.rounds == self.crash_in:
            raise RuntimeError("simulated fault of the loop")
        report = RunReport()
        states = {}
        for table in tables:
            source = table.source
            self.tried[source] = self.tried.get(source, 0) + 1
            if source in self.loads_due:
                report.tables.append(
                    TableReport(source, "cdc", outcome=Outcome.load_pending("a reload: LOAD files written again"))
                )
                continue
            applied, held = self.applied.setdefault(source, set()), self.held.setdefault(source, set())
            pending = [
                f
                for f in listing.files
                if f.kind is FileKind.CDC and f.source == source and f.key not in applied | held
            ]
            if pending and source in self.failing:
                report.failures.append(
                    TableFailure(source, "cdc", RuntimeError(f"simulated fault in {source}\nat ..."))
                )
            elif pending:
                bad = [f.key for f in pending if f.key in self.quarantine]
                good = [f for f in pending if f.key not in self.quarantine]
                applied.update(f.key for f in good)
                held.update(bad)
                self.applied_in.update((f.key, self.rounds) for f in good)
                reasons = sorted({self.quarantine[k] for k in bad})
                report.tables.append(
                    TableReport(
                        source,
                        "cdc",
                        files_applied=len(good),
                        bytes_applied=sum(f.size for f in good),
                        quarantined_files=bad,
                        outcome=Outcome.held("; ".join(reasons)) if bad else Outcome(),
                    )
                )
            states[source] = TableState(True, frozenset(applied), frozenset(held))
        return report, states


@dataclass
class RecordedAlerts:
    sent: list[tuple[str, str]] = field(default_factory=list)

    def send(self, subject: str, message: str) -> None:
        self.sent.append((subject, message))


@dataclass
class Stack:
    """Bronze in moto S3, the file queue (FIFO, the template's redrive policy) and its dead-letter queue."""

    s3: Any
    sqs: Any
    url: str
    dead_letters: str
    glue: Any
    written: int = 0
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def put(self, table: str, announce: bool = True) -> str:
        """A new CDC file of ``table`` (keys sort in write order), with its S3 event unless told not to."""
        self.written += 1
        schema, name = table.split(".")
        key = f"{schema}/{name}/20240301-12{self.written:08d}.csv"
        self.s3.put_object(Bucket=BUCKET, Key=f"dms/{key}", Body=b"I,1")
        if announce:
            self.announce(key)
        return key

    def announce(self, key: str) -> None:
        """An S3 event for ``key`` (again, when it was announced before: EventBridge delivers at least once)."""
        self.sqs.send_message(
            QueueUrl=self.url,
            MessageBody=object_created_event(BUCKET, f"dms/{key}", 3),
            MessageGroupId="dms",  # the template's rule sets one group for every event
            MessageDeduplicationId=uuid.uuid4().hex,
        )

    def depth(self, url: str | None = None) -> tuple[int, int]:
        """(visible, in flight) messages of the file queue (or of ``url``)."""
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        attributes = self.sqs.get_queue_attributes(QueueUrl=url or self.url, AttributeNames=names)["Attributes"]
        return int(attributes[names[0]]), int(attributes[names[1]])

    def client(self) -> Any:
        """The queue's client for the loop, recording every call it sends."""
        stack = self

        class Recording:
            def __getattr__(self, name: str) -> Any:
                method = getattr(stack.sqs, name)

                def call(**kwargs: Any) -> Any:
                    stack.calls.append((name, kwargs))
                    return method(**kwargs)

                return call

        return Recording()

    def made_visible_again(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            (name, kwargs)
            for name, kwargs in self.calls
            if name.startswith("change_message_visibility") or kwargs.get("VisibilityTimeout") == 0
        ]


@pytest.fixture
def stack() -> Iterator[Stack]:
    with mock_aws():
        s3, sqs = boto3.client("s3"), boto3.client("sqs")
        s3.create_bucket(Bucket=BUCKET)
        dlq = sqs.create_queue(QueueName="files-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVE_COUNT}  # the template's
        url = sqs.create_queue(
            QueueName="files.fifo",
            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true", "RedrivePolicy": json.dumps(redrive)},
        )["QueueUrl"]
        glue = boto3.client("glue")
        glue.create_job(Name=CDC_JOB, Role="arn:aws:iam::123456789012:role/glue", Command={"Name": "glueetl"})
        yield Stack(s3, sqs, url, dlq, glue)


class ArrivingNotices(QueueNotices):
    """The queue, with ``arrive`` called as each wait starts: files and events that land while the loop waits."""

    arrive: Callable[[], None] = staticmethod(lambda: None)

    def wait(self, until: float, stopping: threading.Event, note: Callable[[str], bool]) -> set[str]:
        self.arrive()
        return super().wait(until, stopping, note)


class SkewedClock:
    """``time`` for the loop, its ``monotonic`` moved on by ``skew`` seconds."""

    def __init__(self) -> None:
        self.skew = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.skew


def engine_on(stack: Stack, store: S3Bronze | None = None) -> Engine:
    store = store or S3Bronze(stack.s3, BUCKET, "dms")
    return Engine(spark=None, config=CONFIG, store=store)  # the fake rounds need no Spark


def run_follow(
    stack: Stack,
    rounds: FakeRounds,
    settings: FollowSettings,
    notices: QueueNotices,
    on_round: Callable[[Round], None] | None = None,
    alerts: RecordedAlerts | None = None,
    engine: Engine | None = None,
) -> FollowReport:
    return follow(
        engine or engine_on(stack),
        settings,
        notices,
        on_round=on_round,
        alerts=alerts or RecordedAlerts(),
        apply=rounds,
    )


def test_a_table_that_keeps_failing_beside_ten_healthy_ones_dead_letters_nothing_and_is_alerted_once(
    stack: Stack,
) -> None:
    # GIVEN 11 tables, s.t0's files always failing, each table with a file and its event in the queue
    rounds = FakeRounds(failing=[FAILING])
    arrived = {stack.put(table): 0 for table in TABLES}
    alerts = RecordedAlerts()
    engine = engine_on(stack)
    last = MAX_RECEIVE_COUNT + 5  # more rounds than receives before the dead-letter queue

    def each_round(done: Round) -> None:
        if done.number == last:
            engine.stopping.set()
            return
        # WHEN files keep arriving, with their events, in the failing table and two healthy ones each round
        for table in (FAILING, TABLES[1 + done.number % 10], TABLES[1 + (done.number + 5) % 10]):
            arrived[stack.put(table)] = done.number

    notices = QueueNotices(stack.client(), stack.url, BUCKET, "dms")
    settings = FollowSettings(poll_seconds=0.05, retry_cap_seconds=1.0)
    outcome = run_follow(stack, rounds, settings, notices, each_round, alerts, engine)
    # THEN the loop went round more often than maxReceiveCount, and no event reached the dead-letter queue: each
    # was received once and deleted, none made visible again; nothing is left in the queue
    assert outcome.rounds == last and outcome.stopped_by == "interrupted"
    assert stack.depth(stack.dead_letters) == (0, 0)
    assert stack.depth() == (0, 0) and stack.made_visible_again() == []
    assert notices.deleted == len(arrived)
    # AND every healthy table's file was applied within two rounds of arriving
    healthy = {key: at for key, at in arrived.items() if not key.startswith("s/t0/")}
    assert {key: rounds.applied_in[key] - at for key, at in healthy.items() if rounds.applied_in[key] - at > 2} == {}
    # AND the failing table was tried again after growing pauses (not every round), and alerted once, by name
    assert 3 <= rounds.tried[FAILING] < last
    assert outcome.failures.keys() == {FAILING}
    [(subject, message)] = alerts.sent
    assert subject == "s.t0 is failing"
    assert message.startswith("s.t0: its cdc failed: simulated fault in s.t0. ")


@pytest.mark.parametrize("exit_by", ["idle", "max run time", "interrupted", "error"])
def test_however_the_loop_ends_no_event_is_left_in_flight_and_no_run_is_started_for_them(
    stack: Stack, exit_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a failing table's file in bronze and a healthy table's, both listed by the loop's first listing
    rounds = FakeRounds(failing=[FAILING])
    pending = stack.put(FAILING, announce=False)
    stack.put("s.t1", announce=False)
    engine = engine_on(stack)
    # WHEN events arrive while the loop waits, every round: the pending file's (again: EventBridge delivers at
    # least once, and an event can come after a listing found its file) and a new healthy file's
    notices = ArrivingNotices(stack.client(), stack.url, BUCKET, "dms")
    notices.arrive = lambda: (stack.announce(pending), stack.put("s.t2"))
    settings = {
        "idle": FollowSettings(poll_seconds=0.05, idle_seconds=3600),
        "max run time": FollowSettings(poll_seconds=0.05, max_run_seconds=3600),
        "interrupted": FollowSettings(poll_seconds=0.05),
        "error": FollowSettings(poll_seconds=0.05),
    }[exit_by]
    if exit_by == "idle":  # only the pending file's event: nothing new, so the loop ends idle
        notices.arrive = lambda: stack.announce(pending)
    rounds.crash_in = 5 if exit_by == "error" else None

    # (the loop's clock jumps two hours after its fifth round: it ends idle or out of time there, however
    # slow the machine's rounds are)
    clock = SkewedClock()
    monkeypatch.setattr(follow_module, "time", clock)

    def each_round(done: Round) -> None:
        if exit_by == "interrupted" and done.number == 5:
            engine.stopping.set()
        if done.number == 5:
            clock.skew += 7200

    # AND the loop ends that way, with events received in its last round
    if exit_by == "error":
        with pytest.raises(RuntimeError, match="simulated fault of the loop"):
            run_follow(stack, rounds, settings, notices, each_round, engine=engine)
    else:
        assert run_follow(stack, rounds, settings, notices, each_round, engine=engine).stopped_by == exit_by
    assert rounds.rounds >= 4
    # THEN no message is in flight, or visible: each event was deleted once its key was in the index
    assert stack.depth() == (0, 0) and stack.made_visible_again() == []
    # AND the state machine's work check starts no run for them
    decision = check_work(stack.sqs, stack.glue, WorkCheckSettings(stack.url, CDC_JOB, sweep_every_iterations=0), 0)
    assert (decision.start, decision.reason) == (False, "no work")


def test_an_event_whose_key_cannot_be_indexed_stays_in_flight_and_the_others_are_deleted_on_the_way_out(
    stack: Stack,
) -> None:
    # GIVEN two late files (older names than their folder's newest: no listing after that key shows them),
    # announced by one receive; reading bronze fails for the second one's size
    newest = stack.put("s.t1", announce=False)
    late = [newest.replace("12000000", "11000000"), newest.replace("12000000", "10000000").replace("t1", "t2")]

    class Unreadable(S3Bronze):
        def size(self, key: str) -> int | None:
            if key == late[1]:
                raise BronzeError(f"Reading the size of {key} failed: SlowDown")
            return super().size(key)

    engine = engine_on(stack, Unreadable(stack.s3, BUCKET, "dms"))
    notices = ArrivingNotices(stack.client(), stack.url, BUCKET, "dms")

    def arrive() -> None:
        for key in late:
            stack.s3.put_object(Bucket=BUCKET, Key=f"dms/{key}", Body=b"I,1")
            stack.announce(key)
        notices.arrive = lambda: None

    notices.arrive = arrive
    # WHEN the loop follows THEN it fails on the unreadable one
    with pytest.raises(BronzeError, match="SlowDown"):
        run_follow(stack, FakeRounds(), FollowSettings(poll_seconds=0.05), notices, engine=engine)
    # AND on its way out the event of the key it indexed was deleted; the other stays in flight (it comes back
    # when its visibility ends, for the next run), and none was made visible again
    assert notices.deleted == 1 and notices.held.keys() == {late[1]}
    assert stack.depth() == (0, 1) and stack.made_visible_again() == []


def test_a_failing_table_is_alerted_once_per_failure_episode_and_quarantined_files_once_each(tmp_path: Path) -> None:
    # GIVEN local bronze, with a file of s.t1 that a round will quarantine, and a file of s.t0, which fails
    bronze = tmp_path / "bronze"

    def put(table: str, n: int) -> str:
        key = f"{table.replace('.', '/')}/20240301-12{n:08d}.csv"
        (bronze / key).parent.mkdir(parents=True, exist_ok=True)
        (bronze / key).write_bytes(b"I,1")
        return key

    bad = put("s.t1", 1)
    first = put(FAILING, 2)
    rounds = FakeRounds(failing=[FAILING], quarantine={bad: "3 of 4 rows bad (above max_bad_row_ratio 1%)"})
    alerts = RecordedAlerts()
    engine = Engine(spark=None, config=CONFIG, store=LocalBronze(bronze))
    episode = ["first"]

    def each_round(done: Round) -> None:
        failed = FAILING in {f.table for f in done.report.failures}
        if episode == ["first"] and rounds.tried[FAILING] >= 3:
            rounds.failing.clear()  # WHEN s.t0 is fixed after its third try: its next try applies its file
            episode.append("healed")
        elif episode[-1] == "healed" and first in rounds.applied_in:
            rounds.failing.add(FAILING)  # AND it fails again with its next file
            put(FAILING, 3)
            episode.append("second")
        elif episode[-1] == "second" and failed:
            engine.stopping.set()
        if done.number >= 200:
            engine.stopping.set()

    settings = FollowSettings(poll_seconds=0.02, retry_cap_seconds=0.1)
    follow(engine, settings, Polling(), on_round=each_round, alerts=alerts, apply=rounds)
    # THEN four alerts: the quarantined file once (table, file and reason), and s.t0 once per failure episode, with
    # its recovery between them
    assert episode == ["first", "healed", "second"]
    subjects = [subject for subject, _ in alerts.sent]
    assert subjects == ["s.t0 is failing", "s.t1: 1 file(s) quarantined", "s.t0 recovered", "s.t0 is failing"]
    quarantined = alerts.sent[1][1]
    assert "3 of 4 rows bad (above max_bad_row_ratio 1%)" in quarantined and quarantined.endswith(f"Files: {bad}")
    assert "`cdclake replay --quarantined`" in quarantined


def test_the_cdc_job_publishes_alerts_to_its_topic_when_given_one(stack: Stack) -> None:
    # GIVEN the alert topic, with a queue subscribed to read what is published
    sns = boto3.client("sns")
    topic = sns.create_topic(Name="alerts")["TopicArn"]
    inbox = stack.sqs.create_queue(QueueName="inbox")["QueueUrl"]
    inbox_arn = stack.sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=inbox_arn)
    job_alerts = runpy.run_path(str(ROOT / "glue" / "jobs" / "cdc.py"), run_name="job_cdc")["job_alerts"]
    arguments = JobArguments(config="c.yaml", bronze=f"s3://{BUCKET}/dms", warehouse="s3://w", environment="prod")
    # WHEN the job's alerts are built with and without --alert_topic_arn, and one is sent
    assert isinstance(job_alerts(arguments), LoggedAlerts)
    alerts = job_alerts(replace(arguments, cdc=CdcArguments(alert_topic_arn=topic)))
    assert isinstance(alerts, SnsAlerts)
    alerts.send("s.t0 is failing", "s.t0: its cdc failed: simulated fault in s.t0.")
    # THEN the topic received it, its subject naming the environment and the table
    [message] = stack.sqs.receive_message(QueueUrl=inbox, WaitTimeSeconds=1)["Messages"]
    body = json.loads(message["Body"])
    assert (body["Subject"], body["Message"]) == (
        "cdclake prod: s.t0 is failing",
        "s.t0: its cdc failed: simulated fault in s.t0.",
    )


def test_an_alert_that_cannot_be_published_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    class Unreachable:
        def publish(self, **kwargs: Any) -> Any:
            raise RuntimeError("AuthorizationError: not allowed to publish")

    SnsAlerts(Unreachable(), "arn:aws:sns:us-east-1:123456789012:alerts").send("s.t0 is failing", "why")
    assert [r.levelname for r in caplog.records] == ["ERROR", "ERROR"]
    assert "alert: s.t0 is failing: why" in caplog.text and "not allowed to publish" in caplog.text


def test_a_new_run_lists_bronze_once_and_then_only_the_folders_with_news(stack: Stack) -> None:
    # GIVEN 11 tables with a file each, and their events in the queue
    for table in TABLES:
        stack.put(table)
    rounds = FakeRounds()
    engine = engine_on(stack)

    def each_round(done: Round) -> None:
        if done.number == 6:
            engine.stopping.set()

    # WHEN a new run goes six rounds with nothing new after its first
    notices = QueueNotices(stack.client(), stack.url, BUCKET, "dms")
    outcome = run_follow(stack, rounds, FollowSettings(poll_seconds=0.05), notices, each_round, engine=engine)
    # THEN every file was applied in the first round, and bronze was listed at the start only: no folder is
    # looked at again without news (it was: every folder, every round, for the run's first 10 minutes)
    assert set(rounds.applied_in.values()) == {1} and len(rounds.applied_in) == len(TABLES)
    assert outcome.rounds == 6
    # each table's folder from its watermark at the start (a request a folder, whatever bronze's age), then each
    # folder once for its event
    assert outcome.listings <= 2 * len(TABLES), outcome.listings


# ------------------------------------------------------------------------ one failing table across runs
EPISODES = f"s3://{BUCKET}/state/failing-tables.json"


def _a_cdc_run(stack: Stack, rounds: FakeRounds, alerts: RecordedAlerts, new_files: Sequence[str]) -> FollowReport:
    """One Glue CDC run as the job follows: its files' events queued, a fresh loop that ends when idle, the
    failure episodes in S3 (--failure_episodes), and the job's verdict on a table still failing."""
    for table in new_files:
        stack.put(table)
    held_tables = runpy.run_path(str(ROOT / "glue" / "jobs" / "cdc.py"), run_name="job_cdc")["held_tables"]
    notices = QueueNotices(stack.client(), stack.url, BUCKET, "dms")
    outcome = follow(
        engine_on(stack),
        FollowSettings(poll_seconds=0.05, idle_seconds=0.3, retry_cap_seconds=0.1),
        notices,
        alerts=alerts,
        apply=rounds,
        episodes=S3Episodes(stack.s3, EPISODES),
    )
    result: FollowReport = held_tables(outcome, TABLES)
    return result


def test_a_table_failing_run_after_run_is_held_alerted_once_and_once_more_when_it_recovers(stack: Stack) -> None:
    # GIVEN s.t0 failing and ten healthy tables, each with a file queued
    rounds = FakeRounds(failing=[FAILING])
    alerts = RecordedAlerts()
    # WHEN three CDC runs follow the queue one after the other, new files arriving for s.t0 and s.t1 each time
    outcomes = [_a_cdc_run(stack, rounds, alerts, TABLES if run == 0 else [FAILING, "s.t1"]) for run in range(3)]
    # THEN each run ended (idle) without failing, with s.t0 held and every other table's files applied
    assert [o.stopped_by for o in outcomes] == ["idle"] * 3
    assert all(o.failures.keys() == {FAILING} for o in outcomes)
    assert {k for k in rounds.applied_in if not k.startswith("s/t0/")} == {
        f.removeprefix("dms/") for f in _bronze_keys(stack) if not f.startswith("dms/s/t0/")
    }
    # AND s.t0's files stay pending: none applied, none held in quarantine
    assert not rounds.applied[FAILING] and not rounds.held[FAILING]
    # AND exactly one alert for the three runs, its episode recorded in S3 with the reason
    assert [subject for subject, _ in alerts.sent] == ["s.t0 is failing"]
    record = json.loads(stack.s3.get_object(Bucket=BUCKET, Key="state/failing-tables.json")["Body"].read())
    assert list(record["failing"]) == [FAILING] and record["failing"][FAILING]["reason"] == "simulated fault in s.t0"
    # WHEN s.t0 is fixed, and the next two runs apply its files
    rounds.failing.clear()
    for _ in range(2):
        assert _a_cdc_run(stack, rounds, alerts, [FAILING]).failures == {}
    # THEN one recovery alert, and the episode is closed in S3
    assert [subject for subject, _ in alerts.sent] == ["s.t0 is failing", "s.t0 recovered"]
    assert {k.removeprefix("dms/") for k in _bronze_keys(stack) if k.startswith("dms/s/t0/")} <= rounds.applied[FAILING]
    record = json.loads(stack.s3.get_object(Bucket=BUCKET, Key="state/failing-tables.json")["Body"].read())
    assert record == {"failing": {}}


def test_a_run_in_which_every_table_failed_fails(stack: Stack) -> None:
    # GIVEN every table failing (a fault of the run itself: the catalog unreachable, say)
    rounds = FakeRounds(failing=TABLES)
    # WHEN a CDC run follows THEN it fails, naming the tables, so the state machine retries and alerts
    with pytest.raises(TablesFailedError, match="11 tables failed"):
        _a_cdc_run(stack, rounds, RecordedAlerts(), TABLES)


def _bronze_keys(stack: Stack) -> list[str]:
    listed = stack.s3.list_objects_v2(Bucket=BUCKET, Prefix="dms/").get("Contents", [])
    return [o["Key"] for o in listed]


def test_two_runs_recording_the_same_episode_alert_it_once(stack: Stack) -> None:
    # GIVEN two CDC runs (the job's, and one started by hand) that both read the episodes before either wrote
    first, second = S3Episodes(stack.s3, EPISODES), S3Episodes(stack.s3, EPISODES)
    assert first.settle({}, set()).started == second.settle({}, set()).started == frozenset()
    # WHEN both see s.t0 fail, the first writes first
    started = [e.settle({FAILING: "a fault"}, set(TABLES)).started for e in (first, second)]
    # THEN only the first started the episode: the second's conditional write lost (If-None-Match), it read the
    # object again and found the episode recorded
    assert started == [frozenset({FAILING}), frozenset()]
    # AND when both see it applied again, only one ends it (If-Match with the ETag each read)
    ended = [e.settle({}, set(TABLES)).ended for e in (second, first)]
    assert ended == [frozenset({FAILING}), frozenset()]


def test_a_conditional_write_that_lost_is_decided_again_from_what_the_winner_wrote(stack: Stack) -> None:
    # GIVEN an episode store that read s.t0 failing, then another writer ended that episode and started s.t1's
    mine, other = S3Episodes(stack.s3, EPISODES), S3Episodes(stack.s3, EPISODES)
    other.settle({FAILING: "a fault"}, set())
    mine.settle({}, set())
    other.settle({"s.t1": "another fault"}, {FAILING})
    # WHEN this run sees s.t0 healthy and s.t2 failing: its write (If-Match, a stale ETag) is refused
    changes = mine.settle({"s.t2": "a third fault"}, {FAILING, "s.t1"})
    # THEN it read again: s.t0's end was the other writer's, s.t1's end and s.t2's start are its own
    assert (changes.started, changes.ended) == (frozenset({"s.t2"}), frozenset({"s.t1"}))
    record = json.loads(stack.s3.get_object(Bucket=BUCKET, Key="state/failing-tables.json")["Body"].read())
    assert list(record["failing"]) == ["s.t2"]


def test_episodes_that_cannot_be_kept_are_alerted_from_the_run_s_own_record(caplog: pytest.LogCaptureFixture) -> None:
    class Denied:
        def get_object(self, **kwargs: Any) -> Any:
            raise RuntimeError("AccessDenied")

    episodes = S3Episodes(Denied(), EPISODES)
    assert episodes.settle({FAILING: "a fault"}, set()).started == frozenset({FAILING})
    assert episodes.settle({FAILING: "a fault"}, set()).started == frozenset()
    assert "not kept (AccessDenied)" in caplog.text


# ------------------------------------------------------------------------ a reload asked for during a long run
def test_a_run_that_asks_for_a_reload_ends_after_that_round_so_the_reload_starts_at_once(stack: Stack) -> None:
    # GIVEN the CDC job following the queue as the CDC lane (--reload_requests), up to an hour, 11 tables with a file
    # each, and files arriving every round for s.t1
    cdc_follow = runpy.run_path(str(ROOT / "glue" / "jobs" / "cdc.py"), run_name="job_cdc")["_follow"]
    requests = f"s3://{BUCKET}/state/reloads.json"
    arguments = JobArguments(
        config="c.yaml", bronze=f"s3://{BUCKET}/dms", warehouse="s3://w",
        cdc=CdcArguments(queue_url=stack.url, reload_requests=requests,
                         follow=FollowSettings(poll_seconds=0.05, max_run_seconds=3600)),
    )  # fmt: skip
    for table in TABLES:
        stack.put(table)
    rounds = FakeRounds()
    arriving = ArrivingNotices(stack.client(), stack.url, BUCKET, "dms")

    def arrive() -> None:
        stack.put("s.t1")
        if rounds.rounds == 4:  # WHEN DMS reloads s.t3 in the middle of the run (its new files are found)
            rounds.loads_due.add("s.t3")
            stack.put("s.t3")

    arriving.arrive = arrive
    outcome = cdc_follow(arguments, engine_on(stack), notices=arriving, apply=rounds)
    # THEN the round that found it wrote the reload request, and the run ended after that round, not after an hour
    assert (outcome.stopped_by, outcome.rounds) == ("reload requested (s.t3)", 5)
    request = json.loads(stack.s3.get_object(Bucket=BUCKET, Key="state/reloads.json")["Body"].read())
    assert request["tables"] == ["s.t3"]
    # AND every file of the other tables announced so far was applied; s.t3's held (its load is due)
    others = {k.removeprefix("dms/") for k in _bronze_keys(stack) if not k.startswith(("dms/s/t3/", "dms/state/"))}
    assert others == set(rounds.applied_in) - {k for k in rounds.applied_in if k.startswith("s/t3/")}
    assert rounds.tried["s.t3"] == 2 and len(rounds.applied["s.t3"]) == 1  # its first file, before the reload
    assert stack.depth() == (0, 0)
    # AND the state machine's work check, the next thing the pipeline does, starts the full-load job for it
    full_load = "cdclake-test-full-load"
    stack.glue.create_job(Name=full_load, Role="arn:aws:iam::123456789012:role/glue", Command={"Name": "glueetl"})
    from reloads import decide_reload, full_load_runs, parse_request, read_request

    text = read_request(stack.s3, requests)
    assert text is not None
    decision = decide_reload(parse_request(text), full_load_runs(stack.glue, full_load))
    assert (decision.start, decision.request.table_list if decision.request else "") == (True, "s.t3")

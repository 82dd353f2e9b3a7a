"""verify/live.py: when silver has caught up with the moment a comparison started, and what lag looks like."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from cdclake.verify.live import (
    LiveSettings,
    SilverPosition,
    SourcePosition,
    caught_up,
    lag_seconds,
    lag_text,
    persisting,
    wait_for_silver,
)

START = datetime(2026, 11, 29, 4, 0, 0)
SETTINGS = LiveSettings(wait_seconds=60.0, delivery_seconds=20.0, poll_seconds=5.0)


def started() -> SourcePosition:
    return SourcePosition(clock=START, log_position="0/16B3748", noted_at=1000.0)


def test_a_busy_table_catches_up_when_its_newest_change_reaches_the_noted_clock() -> None:
    behind = SilverPosition(START - timedelta(microseconds=1), pending_files=3)
    assert not caught_up(behind, started(), SETTINGS, now=1001.0)
    assert caught_up(SilverPosition(START, pending_files=3), started(), SETTINGS, now=1001.0)


def test_a_quiet_table_catches_up_once_nothing_waits_and_the_delivery_window_has_passed() -> None:
    quiet = SilverPosition(START - timedelta(hours=5), pending_files=0)
    assert not caught_up(quiet, started(), SETTINGS, now=1019.9)  # a change may still be on its way to bronze
    assert caught_up(quiet, started(), SETTINGS, now=1020.0)
    waiting = SilverPosition(START - timedelta(hours=5), pending_files=1)
    assert not caught_up(waiting, started(), SETTINGS, now=5000.0)  # a file waits: not caught up, however late


def test_lag_is_told_with_its_size() -> None:
    silver = SilverPosition(START - timedelta(seconds=42), pending_files=2)
    told = "newest change applied 42 s before verify started, 2 file(s) waiting in bronze"
    assert lag_text(silver, started()) == told
    assert lag_seconds(silver, started()) == 42.0
    assert lag_text(SilverPosition(None, 0), started()) == "no change applied yet"
    assert lag_seconds(SilverPosition(None, 0), started()) is None
    assert started().describe() == "2026-11-29 04:00:00.000000 UTC, log position 0/16B3748"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_waiting_polls_until_silver_catches_up() -> None:
    clock = Clock(1002.0)
    positions = iter([SilverPosition(START - timedelta(seconds=9), 1)] * 2 + [SilverPosition(START, 0)])
    waited = wait_for_silver(
        lambda: next(positions), started(), SETTINGS, deadline=1062.0, clock=clock, sleep=clock.sleep
    )
    assert waited.caught_up and waited.silver == SilverPosition(START, 0)
    assert clock.slept == [5.0, 5.0]


def test_waiting_wakes_when_the_delivery_window_ends_and_gives_up_at_the_deadline() -> None:
    clock = Clock(1017.0)
    quiet = SilverPosition(START - timedelta(hours=1), 0)
    waited = wait_for_silver(lambda: quiet, started(), SETTINGS, deadline=1062.0, clock=clock, sleep=clock.sleep)
    assert waited.caught_up and clock.slept == [3.0]  # woke as the window ended, not a whole poll later
    clock = Clock(1050.0)
    stuck = SilverPosition(START - timedelta(seconds=30), 4)
    waited = wait_for_silver(lambda: stuck, started(), SETTINGS, deadline=1062.0, clock=clock, sleep=clock.sleep)
    assert not waited.caught_up and waited.silver == stuck
    assert clock.now == 1062.0 and clock.slept == [5.0, 5.0, 2.0]


def test_only_keys_differing_both_times_persist() -> None:
    assert persisting(["id=1", "id=2", "id=3"], ["id=3", "id=4", "id=1"]) == ["id=3", "id=1"]
    assert persisting(["id=1"], []) == []


# --- verify.run._settle: which keys are confirmed, which were lag (the reads faked; no Spark) ----------


def _settled(
    reads: list[dict[str, bytes | None]], positions: list[SilverPosition], told: list[str] | None = None
) -> Any:
    """``_settle`` over a first read of id=1..4 differing, then ``reads`` (each: key -> its source row digest),
    silver at ``positions`` poll after poll."""
    from cdclake.verify import run as engine_verify
    from cdclake.verify.result import TableComparison
    from cdclake.verify.run import LiveCheck

    def comparison(digests: dict[str, bytes | None]) -> TableComparison:
        columns = {k: ["v"] for k in digests}
        return TableComparison(
            table="s.t", different=sorted(digests), differing_columns=columns, source_digests=dict(digests)
        )

    first = replace(comparison({f"id={i}": b"a" for i in range(1, 5)}), read_again=(("id", "integer"), []))
    again = iter(comparison(d) for d in reads)
    polls = iter(positions)
    clock = Clock(1000.0)

    class Dialect:
        def position(self) -> SourcePosition:
            return started()

    live = LiveCheck(SETTINGS, lambda table: next(polls), clock=clock, sleep=clock.sleep)
    if told is not None:
        live = LiveCheck(SETTINGS, lambda table: next(polls), clock=clock, sleep=clock.sleep, tell=told.append)
    original = engine_verify.compare_again
    engine_verify.compare_again = lambda *args: next(again)  # type: ignore[assignment]
    try:
        return engine_verify._settle(None, Dialect(), (None, None), (first, started()), live, deadline=1060.0)  # type: ignore[arg-type]
    finally:
        engine_verify.compare_again = original


def test_a_key_whose_source_row_stood_still_is_confirmed_and_one_that_kept_moving_is_not() -> None:
    caught = SilverPosition(START, 0)
    # id=1 and id=2 no longer differ (lag); id=3 differs with its source row as first read; id=4 moves every read
    reads = [{"id=3": b"a", "id=4": b"b"}, {"id=3": b"a", "id=4": b"c"}, {"id=3": b"a", "id=4": b"d"}]
    result = _settled(reads, [caught] * 10)
    assert result.different == ["id=3"] and result.verdict == "differing"
    assert (result.lag_resolved, result.unconfirmed) == (2, 1)


def test_a_table_silver_does_not_catch_up_with_is_lagging_with_every_key_kept() -> None:
    behind = SilverPosition(START - timedelta(seconds=30), 2)
    result = _settled([], [behind] * 100)
    assert result.verdict == "lagging" and result.different == ["id=1", "id=2", "id=3", "id=4"]
    assert (result.lag_resolved, result.unconfirmed) == (0, 0)
    assert result.lagging == "newest change applied 30 s before verify started, 2 file(s) waiting in bronze"


def test_settling_a_differing_table_tells_what_it_waits_for_naming_the_table() -> None:
    told: list[str] = []
    _settled([], [SilverPosition(START - timedelta(seconds=30), 2)] * 100, told)
    assert told and told[0].startswith("verify: s.t differs from the source, which may be lag: waiting")
    assert "2 CDC file(s) of it wait in bronze" in told[0]


def test_a_wait_says_what_it_waits_for_when_it_starts_and_every_ten_seconds() -> None:
    # GIVEN a quiet table (nothing waits in bronze) read at t=1000 s: silver counts as caught up once the
    # 90 s delivery window has passed; verify gives up at t=1300 s
    settings = LiveSettings(wait_seconds=300.0, delivery_seconds=90.0, poll_seconds=5.0)
    quiet = SilverPosition(START - timedelta(hours=1), pending_files=0)
    clock = Clock(1000.0)
    told: list[tuple[float, str]] = []

    def silver_at() -> SilverPosition:
        clock.now += 0.5  # reading silver's position takes a moment
        return quiet

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        clock.now += seconds

    # WHEN verify waits for it
    waited = wait_for_silver(
        silver_at, started(), settings, 1300.0, clock, sleep, lambda text: told.append((clock.now, text)), "s.items"
    )
    # THEN it caught up after the window, and meanwhile said so at once and at least every 10 s
    assert waited.caught_up
    times = [at for at, _ in told]
    assert times[0] == 1000.5 and all(b - a <= 10.5 for a, b in itertools.pairwise(times))
    assert 1090.0 - times[-1] <= 10.5 and len(told) >= 9  # up to the end of the window
    # AND each line names the table, why it waits and how long at most
    assert told[0][1] == (
        "verify: s.items differs from the source, which may be lag: waiting for silver to catch up before reading "
        "it again: nothing of it waits in bronze, but a change committed before it was read may still be on its "
        "way there (--delivery 90 s); 90 s left at most (--wait ends in 300 s)"
    )
    assert told[1][1].endswith("; 79 s left at most (--wait ends in 289 s)"), told[1]


def test_a_wait_for_files_says_how_many_and_waits_to_the_end_of_wait() -> None:
    behind = SilverPosition(START - timedelta(seconds=30), pending_files=2)
    told: list[str] = []
    clock = Clock(1000.0)
    wait_for_silver(lambda: behind, started(), SETTINGS, 1000.0, clock, clock.sleep, told.append, "s.t")
    assert told == []  # the deadline has passed: nothing to wait for, nothing said

    def sleep(seconds: float) -> None:
        clock.now += seconds

    wait_for_silver(lambda: behind, started(), SETTINGS, 1030.0, clock, sleep, told.append, "s.t")
    assert "2 CDC file(s) of it wait in bronze for `cdclake run` to apply them; 30 s left at most" in told[0]

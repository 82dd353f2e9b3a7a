"""``engine.follow.Follower``: which states a round is handed, and which it must read again (no Spark:
the round itself is a fake that records what it was given)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cdclake.alerts import LoggedAlerts
from cdclake.config import TableConfig, parse_config
from cdclake.context import Engine
from cdclake.dms.files import BronzeListing, FileKind
from cdclake.dms.notices import Polling
from cdclake.dms.store import LocalBronze
from cdclake.dms.writer import write_csv
from cdclake.engine.follow import Follower, FollowSettings
from cdclake.engine.select import TableState
from cdclake.report import Outcome, RunReport, TableFailure, TableReport

CONFIG = parse_config(
    "tables:\n" + "".join(f"  s.{t}: {{primary_key: [id], columns: {{id: int}}}}\n" for t in ("a", "b")), "test"
)


class Rounds:
    """Applies each due table's pending CDC files; records the states each round was handed."""

    def __init__(self) -> None:
        self.handed: list[dict[str, TableState]] = []
        self.failing: set[str] = set()
        self.load_pending: set[str] = set()
        self.applied: dict[str, frozenset[str]] = {}

    def __call__(
        self, engine: Engine, listing: BronzeListing, due: Sequence[TableConfig], states: Mapping[str, TableState]
    ) -> tuple[RunReport, dict[str, TableState]]:
        self.handed.append(dict(states))
        report, left = RunReport(), {}
        for table in due:
            source = table.source
            if source in self.failing:
                report.failures.append(TableFailure(source, "cdc", RuntimeError("simulated")))
                continue
            if source in self.load_pending:
                report.tables.append(
                    TableReport(source, "full-load", outcome=Outcome.load_pending("a new load in bronze"))
                )
                continue
            files = [f.key for f in listing.files if f.kind is FileKind.CDC and f.source == source]
            self.applied[source] = self.applied.get(source, frozenset()) | frozenset(files)
            report.tables.append(TableReport(source, "cdc", files_applied=len(files)))
            left[source] = TableState(True, self.applied[source], frozenset(), snapshot_id=len(self.handed))
        return report, left


def _arrive(tmp_path: Path, table: str, name: str) -> None:
    write_csv(tmp_path / "s" / table / f"{name}.csv", [["I", "1"]])


def _arrive_in_both(tmp_path: Path, name: str) -> None:
    for table in ("a", "b"):
        _arrive(tmp_path, table, name)


def _next_round(follower: Follower) -> None:
    new = follower.look(set(), set())
    follower.round(follower.due(new, set()), None)


def _after_a_first_round(tmp_path: Path, relist_seconds: float = 3600.0) -> tuple[Rounds, Follower]:
    """A follower whose first round applied a file of each table (it lists bronze whole every
    ``relist_seconds``), and the fake rounds it runs."""
    _arrive_in_both(tmp_path, "20240102-0000010000")
    rounds = Rounds()
    engine = Engine(spark=None, config=CONFIG, store=LocalBronze(tmp_path))  # type: ignore[arg-type]
    settings = FollowSettings(poll_seconds=0.0, relist_seconds=relist_seconds)
    follower = Follower(engine, settings, Polling(), None, LoggedAlerts(), rounds)
    follower.index.relist()
    follower.round(follower.selected, None)
    return rounds, follower


def test_a_round_is_handed_the_states_the_rounds_before_it_left(tmp_path: Path) -> None:
    # GIVEN a first round that applied a file of each table
    rounds, follower = _after_a_first_round(tmp_path)
    assert rounds.handed == [{}]  # the first round reads every state
    first = dict(follower.states)
    # WHEN new files arrive and the next round applies them
    _arrive_in_both(tmp_path, "20240102-0000020000")
    _next_round(follower)
    # THEN that round was handed the states the first one left: nothing to read again
    assert rounds.handed[1] == first
    assert follower.states["s.a"].applied == {"s/a/20240102-0000010000.csv", "s/a/20240102-0000020000.csv"}


def test_a_table_that_failed_is_read_again_until_a_round_applies_it(tmp_path: Path) -> None:
    # GIVEN both tables applied once, then a round in which s.a fails
    rounds, follower = _after_a_first_round(tmp_path)
    rounds.failing = {"s.a"}
    _arrive_in_both(tmp_path, "20240102-0000020000")
    _next_round(follower)
    assert set(rounds.handed[1]) == {"s.a", "s.b"}
    # WHEN the next rounds work the tables again, s.a healthy again
    rounds.failing = set()
    follower.retry_at.clear()  # its retry is due
    _arrive_in_both(tmp_path, "20240102-0000030000")
    _next_round(follower)
    _arrive(tmp_path, "a", "20240102-0000040000")
    _next_round(follower)
    # THEN the round after the failure read s.a's state (not handed in), the one after trusted it again
    assert set(rounds.handed[2]) == {"s.b"}
    assert set(rounds.handed[3]) == {"s.a", "s.b"}


def test_a_table_whose_load_is_due_elsewhere_is_read_again(tmp_path: Path) -> None:
    # GIVEN a round in which s.b's load is pending in the other lane
    rounds, follower = _after_a_first_round(tmp_path)
    rounds.load_pending = {"s.b"}
    _arrive(tmp_path, "b", "20240102-0000020000")
    _next_round(follower)
    # WHEN the next round works it
    rounds.load_pending = set()
    _arrive(tmp_path, "b", "20240102-0000030000")
    _next_round(follower)
    # THEN its state was read again (the load may have changed the table), s.a's still trusted
    assert set(rounds.handed[2]) == {"s.a"}


def test_a_whole_listing_reads_every_state_again(tmp_path: Path) -> None:
    # GIVEN a loop that lists bronze whole before every round
    rounds, follower = _after_a_first_round(tmp_path, relist_seconds=0.0)
    # WHEN the next round works the tables
    _arrive_in_both(tmp_path, "20240102-0000020000")
    _next_round(follower)
    # THEN it was handed no state: what other processes did since is read
    assert rounds.handed[1] == {}

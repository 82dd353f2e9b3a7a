"""engine/cut and dms/progress: the bound a round applies up to, and whether each table is at it (pure)."""

from __future__ import annotations

from cdclake.config import parse_config
from cdclake.dms.files import BronzeListing, classify
from cdclake.dms.progress import PROGRESS_KEY, CaptureProgress, TableProgress
from cdclake.engine.cut import CAPTURE, NONE, TRANSACTIONS, cut_after_round, cut_bound, table_at
from cdclake.engine.select import TableState
from cdclake.lake.cuts import CutTags, PublishedCut, TagMoves, dated_tag
from configs import keyed_tables

CONFIG = parse_config(keyed_tables("s.a", "s.b"), "t.yaml")
A, B = CONFIG.tables


def _key(table: str, second: int) -> str:
    return f"s/{table}/20240102-00{second:02d}000000{second:020d}.csv"


def _progress(position: int, **newest: str | None) -> CaptureProgress:
    return CaptureProgress(position, f"0/{position:X}", "2024-01-02 00:00:05.000000",
                           {f"s.{t}": TableProgress(k) for t, k in newest.items()})  # fmt: skip


def _listing(*keys: str, transaction_path: str | None = None) -> BronzeListing:
    return classify([(k, 1) for k in keys], transaction_path)


def _state(*applied: str, held: tuple[str, ...] = (), snapshot: int | None = 7) -> TableState:
    return TableState(True, frozenset(applied), frozenset(held), {}, snapshot)


def test_the_progress_record_round_trips_and_is_not_a_bronze_file() -> None:
    record = CaptureProgress(42, "0/2A", None, {"s.a": TableProgress(_key("a", 1), 3, "held: why", True)}, "now")
    assert CaptureProgress.from_json(record.to_json()) == record
    assert classify([(PROGRESS_KEY, 10), (_key("a", 1), 1)]) == _listing(_key("a", 1))


def test_a_round_applies_a_captured_table_up_to_its_newest_file_at_the_position() -> None:
    # GIVEN a record naming a's file of second 2 and no file of b, and bronze holding later files of both
    listing = _listing(_key("a", 1), _key("a", 2), _key("a", 3), _key("b", 3), "s/a/LOAD00000001.csv", _key("c", 9))
    bound = cut_bound(_progress(2, a=_key("a", 2), b=None), None, listing)
    # THEN the round may apply a's first two files and its LOAD file, nothing of b, and any table not captured
    assert bound.kind == CAPTURE and bound.position == f"{2:020d}"
    assert sorted(f.key for f in bound.listing.files) == sorted(
        [_key("a", 1), _key("a", 2), "s/a/LOAD00000001.csv", _key("c", 9)]
    )


def test_a_table_is_at_the_cut_only_with_its_newest_file_applied_nothing_after_and_nothing_held() -> None:
    bound = cut_bound(_progress(2, a=_key("a", 2), b=_key("b", 1)), None, _listing(_key("a", 1), _key("a", 2)))
    assert table_at(bound, A, _state(_key("a", 1), _key("a", 2))) is None
    assert table_at(bound, A, _state(_key("a", 1))) == f"{_key('a', 2)} is not applied yet"
    beyond = table_at(bound, A, _state(_key("a", 1), _key("a", 2), _key("a", 3)))
    assert beyond is not None and "after the position" in beyond
    held = table_at(bound, A, _state(_key("a", 2), held=(_key("a", 1),)))
    assert held == f"{_key('a', 1)} is held in quarantine"
    assert table_at(bound, A, None) is not None
    # a quiet table: its newest file is old, and applied
    assert table_at(bound, B, _state(_key("b", 1))) is None
    # a table capture does not list, holds or loaded after the position
    other = cut_bound(_progress(2, a=_key("a", 2)), None, _listing())
    assert table_at(other, B, _state()) == "not in the capture's progress record (not captured)"
    held_by_capture = CaptureProgress(2, "0/2", None, {"s.a": TableProgress(_key("a", 2), held="unlogged value")})
    assert "held by capture" in (table_at(cut_bound(held_by_capture, None, _listing()), A, _state(_key("a", 2))) or "")
    late_load = CaptureProgress(2, "0/2", None, {"s.a": TableProgress(None, loaded_at=3)})
    assert table_at(cut_bound(late_load, None, _listing()), A, _state()) == (
        "its LOAD files were taken after the position"
    )


def test_the_cut_names_every_table_or_says_why_not() -> None:
    bound = cut_bound(_progress(2, a=_key("a", 2), b=_key("b", 1)), None, _listing())
    states = {"s.a": _state(_key("a", 2), snapshot=11), "s.b": _state(_key("b", 1), snapshot=12)}
    cut, why = cut_after_round(bound, CONFIG.tables, states, lambda t: t.target, lambda t, s: None)
    assert cut is not None and why == [] and cut.snapshots == {"a": 11, "b": 12}
    assert cut.commit_ts == "2024-01-02 00:00:05.000000"
    cut, why = cut_after_round(bound, CONFIG.tables, {"s.a": states["s.a"]}, lambda t: t.target, lambda t, s: None)
    assert cut is None and len(why) == 1 and why[0].startswith("s.b: ")


def test_transaction_files_bound_by_the_newest_and_per_table_files_prove_nothing() -> None:
    keys = ("cdc/20240102-0001000000.csv", "cdc/20240102-0002000000.csv")
    listing = _listing(*keys, transaction_path="cdc")
    bound = cut_bound(None, "cdc", listing)
    assert bound.kind == TRANSACTIONS and bound.newest_file is not None and bound.newest_file.key == keys[1]
    states = {"s.a": _state(*keys, snapshot=1), "s.b": _state(*keys, snapshot=2)}
    stamps = {1: "2024-01-02 00:00:01", 2: "2024-01-02 00:00:02"}
    cut, _ = cut_after_round(bound, CONFIG.tables, states, lambda t: t.target, lambda t, s: stamps[s])
    assert cut is not None and cut.commit_ts == "2024-01-02 00:00:02" and cut.position_text == keys[1]
    behind = {"s.a": _state(keys[0], snapshot=1), "s.b": states["s.b"]}
    assert cut_after_round(bound, CONFIG.tables, behind, lambda t: t.target, lambda t, s: None)[0] is None
    plain = cut_bound(None, None, _listing(_key("a", 1)))
    assert plain.kind == NONE and "PreserveTransactions" in plain.why_none


def _cut_at(commit_ts: str | None) -> PublishedCut:
    return PublishedCut(CAPTURE, "1", "0/1", commit_ts, {"a": 1})


def test_a_table_gets_a_dated_tag_for_the_first_cut_of_each_hour_and_loses_those_older_than_its_days() -> None:
    tags = CutTags(keep_days=7)
    # the first cut: its latest tag and its dated one
    assert tags.moves(_cut_at("2024-01-02 00:00:01.000000"), ["main"]) == TagMoves(
        ("cdclake_cut", "cdclake_cut_20240102_000001_000000")
    )
    # a later cut of the same hour moves the latest tag only; the next hour's gets its own
    first = ["main", "cdclake_cut", "cdclake_cut_20240102_000001_000000"]
    assert tags.moves(_cut_at("2024-01-02 00:59:59.999999"), first) == TagMoves(("cdclake_cut",))
    assert tags.moves(_cut_at("2024-01-02 01:00:00.000000"), first).set[1] == "cdclake_cut_20240102_010000_000000"
    # seven days of source time after a dated tag's T it stays; a moment more and the cut removes it
    assert tags.moves(_cut_at("2024-01-09 00:00:01.000000"), first).removed == ()
    later = tags.moves(_cut_at("2024-01-09 00:00:01.000001"), first)
    assert later.removed == ("cdclake_cut_20240102_000001_000000",) and len(later.set) == 2
    # none with keep_days 0, and none for a cut with no T yet
    assert CutTags(keep_days=0).moves(_cut_at("2024-01-02 00:00:01.000000"), ["main"]) == TagMoves(("cdclake_cut",))
    assert tags.moves(_cut_at(None), first) == TagMoves(("cdclake_cut",))
    assert dated_tag("2024-01-02 00:00:01.000000") == "cdclake_cut_20240102_000001_000000"
    # a cut in the same hour as the tagged one asks no dated tag of a table it left alone; the next hour's does
    assert tags.same_hour(_cut_at("2024-01-02 00:00:01.000000"), _cut_at("2024-01-02 00:59:59.999999"))
    assert not tags.same_hour(_cut_at("2024-01-02 00:59:59.999999"), _cut_at("2024-01-02 01:00:00.000000"))
    assert not tags.same_hour(_cut_at(None), _cut_at("2024-01-02 01:00:00.000000"))
    assert CutTags(keep_days=0).same_hour(_cut_at(None), _cut_at("2024-01-02 01:00:00.000000"))

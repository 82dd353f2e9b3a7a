"""Bronze listed from each table's watermark (``dms.index.list_from``, ``engine.run.listing_starts``), the
applied keys compacted to it (``lake.ledger_record.AppliedKeys``, ``engine.select.compact_applied``), and a late file
below it found by its S3 event (``engine.follow.Follower.note``). No Spark; S3 is moto."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cdclake.alerts import LoggedAlerts
from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile, parse_key
from cdclake.dms.index import BronzeIndex, list_from
from cdclake.dms.notices import Polling
from cdclake.dms.s3_bronze import S3Bronze
from cdclake.dms.store import LocalBronze
from cdclake.engine.follow import Follower, FollowSettings
from cdclake.engine.run import listing_starts, unconfigured_sources
from cdclake.engine.select import TableState, compact_applied, look_back_stamp
from cdclake.lake.ledger_record import CHECKPOINT_PROPERTY, AppliedKeys, LedgerCheckpoint, LoadedFile

from .conftest import BUCKET
from .test_follow_bronze import CountingS3, put

FAR_AHEAD = "99991231-235959"  # a look-back that stops nothing: every file is older
CONFIG = parse_config("tables:\n  s.t: {primary_key: [id], columns: {id: int}}\n", "test")


def cdc(name: str, folder: str = "s/t") -> BronzeFile:
    return parse_key(f"{folder}/{name}.csv", 10)


def keys(*names: str) -> frozenset[str]:
    return frozenset(f"s/t/{n}.csv" for n in names)


# --- the listing ------------------------------------------------------------------------------------------------


def test_a_folder_is_listed_after_its_watermark_with_start_after_and_its_new_load_files_are_found(
    s3_client: Any,
) -> None:
    # GIVEN a table folder with old CDC files, one at the watermark, newer ones, and a reload's LOAD files
    counting = CountingS3(s3_client)
    for name in ("20240301-1200000000", "20240301-1201000000", "20240301-1202000000", "20240301-1203000000"):
        put(s3_client, f"s/t/{name}.csv")
    put(s3_client, "s/t/LOAD00000001.csv")
    # WHEN the folder is listed from the watermark
    listing = list_from(S3Bronze(counting, BUCKET, "dms"), {"s/t": "s/t/20240301-1201000000.csv"})
    # THEN S3 was asked once, after the watermark, and answered only what sorts after it: the newer CDC files
    # and the LOAD file (LOAD sorts after every timestamp name)
    assert counting.listed == ["dms/s/t/20240301-1201000000.csv"]
    assert [f.name for f in listing.files] == [
        "LOAD00000001.csv",
        "20240301-1202000000.csv",
        "20240301-1203000000.csv",
    ]


def test_date_folders_are_listed_from_the_watermarks_day_on_in_s3_and_on_a_local_directory_alike(
    s3_client: Any, tmp_path: Path
) -> None:
    # GIVEN the same keys in year-first date folders on S3 and on disk, and the table's LOAD files
    names = [
        "2024/02/28/20240228-2359000000.csv",
        "2024/02/29/20240229-0100000000.csv",
        "2024/03/01/20240301-0000000000.csv",
        "2024/03/01/20240301-0100000000.csv",
        "2024/03/02/20240302-0000000000.csv",
        "2025/01/01/20250101-0000000000.csv",
        "LOAD00000001.csv",
    ]
    for name in names:
        put(s3_client, f"s/t/{name}")
        (tmp_path / "s/t" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "s/t" / name).write_bytes(b"x")
    start = {"s/t": "s/t/2024/03/01/20240301-0000000000.csv"}
    # WHEN both are listed from a watermark on 2024-03-01
    on_s3 = list_from(S3Bronze(s3_client, BUCKET, "dms"), start)
    on_disk = list_from(LocalBronze(tmp_path), start)
    # THEN only what follows it: the rest of its day, the later date folders and the LOAD file, in both stores
    expected = {f"s/t/{n}" for n in names[3:]}
    assert {f.key for f in on_s3.files} == expected
    assert {f.key for f in on_disk.files} == expected


def test_a_local_listing_after_a_key_does_not_walk_the_date_folders_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN date folders before and after a key in February
    for day in ("2024/01/01", "2024/02/15", "2024/03/01"):
        (tmp_path / "s/t" / day).mkdir(parents=True)
        (tmp_path / "s/t" / day / f"{day.replace('/', '')}-0000000000.csv").write_bytes(b"x")
    walked: list[str] = []
    real_walk = os.walk

    def recording_walk(top: Any, **kwargs: Any) -> Any:
        for dirpath, dirs, names in real_walk(top, **kwargs):
            walked.append(Path(dirpath).relative_to(tmp_path).as_posix())
            yield dirpath, dirs, names

    monkeypatch.setattr(os, "walk", recording_walk)
    # WHEN the folder is listed after the February file
    listing = list_from(LocalBronze(tmp_path), {"s/t": "s/t/2024/02/15/20240215-0000000000.csv"})
    # THEN January's folder was never walked, and only March's file is listed
    assert "s/t/2024/01" not in walked and "s/t/2024/01/01" not in walked
    assert "s/t/2024/03/01" in walked
    assert [f.key for f in listing.files] == ["s/t/2024/03/01/20240301-0000000000.csv"]


def test_a_run_lists_each_table_from_its_watermark_and_a_table_without_one_whole() -> None:
    # GIVEN two tables: one with a watermark, one never compacted
    config = parse_config(
        "tables:\n  s.a: {primary_key: [id], columns: {id: int}}\n  s.b: {primary_key: [id], columns: {id: int}}\n",
        "test",
    )
    engine = Engine(spark=None, config=config, store=LocalBronze(Path("/nonexistent")))  # type: ignore[arg-type]
    marked = AppliedKeys(frozenset(), {"s/a": "s/a/20240301-1200000000.csv"})
    states = {"s.a": TableState(True, marked, frozenset()), "s.b": TableState(True, frozenset(), frozenset())}
    # WHEN the run's listing starts are chosen
    starts = listing_starts(engine, config.tables, states)
    # THEN a starts after its watermark, b is listed whole
    assert starts == {"s/a": "s/a/20240301-1200000000.csv", "s/b": None}


def test_an_index_relisted_from_a_watermark_looks_after_it_even_with_no_file_of_the_folder_indexed(
    s3_client: Any,
) -> None:
    # GIVEN an index relisted from a watermark beyond which bronze holds nothing yet
    counting = CountingS3(s3_client)
    put(s3_client, "s/t/20240301-1200000000.csv")
    index = BronzeIndex(S3Bronze(counting, BUCKET, "dms"))
    assert index.relist({"s/t": "s/t/20240301-1200000000.csv"}) == set()
    # WHEN a file arrives and the folder is looked at
    put(s3_client, "s/t/20240301-1300000000.csv")
    new = index.look(["s/t"])
    # THEN the look started after the watermark (not the whole folder), and found the file
    assert counting.listed[-1] == "dms/s/t/20240301-1200000000.csv"
    assert new == {"s/t/20240301-1300000000.csv"}


# --- the compacted applied keys ---------------------------------------------------------------------------------


def test_the_watermark_moves_over_the_contiguous_applied_prefix_only() -> None:
    # GIVEN files a, b, d applied and c pending (listed, neither applied nor held)
    listed = [cdc(n) for n in ("20240301-01", "20240301-02", "20240301-03", "20240301-04")]
    applied = AppliedKeys.of(keys("20240301-01", "20240301-02", "20240301-04"))
    # WHEN compacted
    compacted = compact_applied(applied, frozenset(), listed, FAR_AHEAD)
    # THEN the watermark stops before c; d stays named; c is still pending and a, b, d applied
    assert compacted.watermarks == {"s/t": "s/t/20240301-02.csv"}
    assert compacted.keys == keys("20240301-04")
    assert [k in compacted for k in sorted(keys("20240301-01", "20240301-02", "20240301-03", "20240301-04"))] == [
        True,
        True,
        False,
        True,
    ]
    assert len(compacted) == 3


def test_a_quarantined_file_below_the_watermark_stays_an_exception_and_pending_until_applied() -> None:
    # GIVEN a, c applied and b held in quarantine
    listed = [cdc(n) for n in ("20240301-01", "20240301-02", "20240301-03")]
    state = TableState(True, keys("20240301-01", "20240301-03"), keys("20240301-02"))
    # WHEN compacted
    compacted = state.compacted(listed, FAR_AHEAD)
    # THEN the watermark passed b as an exception: not applied (and held, so not pending either)
    assert compacted.applied.watermarks == {"s/t": "s/t/20240301-03.csv"}
    assert compacted.applied.exceptions == keys("20240301-02")
    assert "s/t/20240301-02.csv" not in compacted.applied
    assert compacted.pending(listed) == []
    # AND once released from quarantine it is pending again, and once applied (a replay) no exception is left
    released = compacted.after(released=keys("20240301-02"))
    assert [f.name for f in released.pending(listed)] == ["20240301-02.csv"]
    replayed = released.after(applied=keys("20240301-02"))
    assert replayed.applied.exceptions == frozenset() and replayed.pending(listed) == []


def test_the_watermark_stays_the_look_back_behind_the_clock() -> None:
    # GIVEN three applied files, the last two within the look-back of now
    listed = [cdc(n) for n in ("20240301-115000", "20240301-120100", "20240301-123000")]
    applied = AppliedKeys.of(f.key for f in listed)
    below = look_back_stamp(datetime(2024, 3, 1, 13, 0, 0), 3600)
    # WHEN compacted at 13:00 with an hour's look-back
    compacted = compact_applied(applied, frozenset(), listed, below)
    # THEN it covers only the file named before 12:00; the others stay named
    assert below == "20240301-120000"
    assert compacted.watermarks == {"s/t": "s/t/20240301-115000.csv"}
    assert compacted.keys == keys("20240301-120100", "20240301-123000")


def test_a_folder_whose_date_folders_do_not_keep_time_order_gets_no_watermark() -> None:
    # GIVEN DDMMYYYY date folders (key order is not time order)
    listed = [parse_key("s/t/01032024/20240301-01.csv", 1), parse_key("s/t/02022024/20240202-01.csv", 1)]
    applied = AppliedKeys.of(f.key for f in listed)
    # WHEN compacted
    compacted = compact_applied(applied, frozenset(), listed, FAR_AHEAD)
    # THEN nothing is covered: every key stays named
    assert compacted.watermarks == {} and compacted.keys == applied.keys


def test_load_files_are_never_covered_by_a_watermark() -> None:
    # GIVEN a loaded table whose CDC files are all applied
    listed = [cdc("20240301-01"), cdc("20240301-02")]
    state = TableState.after_load([parse_key("s/t/LOAD00000001.csv", 5)], frozenset()).after(
        applied=[f.key for f in listed]
    )
    # WHEN compacted
    compacted = state.compacted(listed, FAR_AHEAD)
    # THEN the LOAD file stays named (it sorts after every CDC name), and a reload's new LOAD file is not applied
    assert compacted.applied.keys == {"s/t/LOAD00000001.csv"}
    assert "s/t/LOAD00000002.csv" not in compacted.applied
    assert compacted.cdc_applied


def test_the_state_is_bounded_by_the_keys_since_the_watermark_not_the_history() -> None:
    # GIVEN a table that applied 10,000 files, one batch of 100 at a time, each batch compacted first
    state = TableState(True, frozenset(), frozenset())
    sizes = []
    for batch in range(100):
        files = [cdc(f"2024{batch // 28 + 1:02d}{batch % 28 + 1:02d}-{i:04d}") for i in range(100)]
        state = state.compacted(files, FAR_AHEAD).after(applied=[f.key for f in files])
        sizes.append(state.applied.size)
    # THEN what it holds never exceeds one batch and a watermark, and it counts every file applied
    assert max(sizes) <= 101
    assert len(state.applied) == 10_000


def test_a_checkpoint_reads_back_as_the_state_it_recorded() -> None:
    # GIVEN a compacted state with a watermark, an exception, named keys and a loaded LOAD file
    state = TableState(
        True,
        AppliedKeys(keys("20240301-05"), {"s/t": "s/t/20240301-04.csv"}, keys("20240301-02"), 7),
        frozenset(),
        {"s/t/LOAD00000001.csv": LoadedFile("s/t/LOAD00000001.csv", 5, "v1"), "s/t/20240101-01.csv": LoadedFile("x")},
        cdc_since_load=True,
    )
    # WHEN its checkpoint is written and read back
    stored = state.checkpoint().properties()
    read = LedgerCheckpoint.from_summary(stored[CHECKPOINT_PROPERTY])
    # THEN it says the same (the superseded CDC file is not kept among the loaded files: the keys hold it)
    assert read is not None
    assert read.applied == state.applied and len(read.applied) == 7
    assert read.full_load_done and read.cdc_applied
    assert read.loaded == {"s/t/LOAD00000001.csv": LoadedFile("s/t/LOAD00000001.csv", 5, "v1")}


def test_an_uncompacted_ledger_is_not_checkpointed_while_it_names_too_many_keys() -> None:
    # GIVEN an old ledger read whole (every key named)
    state = TableState(True, frozenset(f"s/t/20240301-{i:06d}.csv" for i in range(5000)), frozenset())
    # THEN its checkpoint writes nothing (the snapshot summary stays small)
    assert state.checkpoint().properties() == {}


# --- a late file below the watermark ------------------------------------------------------------------------


def test_an_announced_file_below_the_watermark_written_later_than_the_look_back_is_pending_again(
    tmp_path: Path,
) -> None:
    # GIVEN a table whose watermark covers 2024-03-01 12:00, and two files named before it: one written then
    # (an event delivered again) and one written today (a file that landed late)
    engine = Engine(spark=None, config=CONFIG, store=LocalBronze(tmp_path))  # type: ignore[arg-type]
    follower = Follower(engine, FollowSettings(), Polling(), None, LoggedAlerts(), lambda *a: (None, {}))  # type: ignore[arg-type,return-value]
    follower.states["s.t"] = TableState(
        True, AppliedKeys(frozenset(), {"s/t": "s/t/20240301-1200000000.csv"}), frozenset()
    )
    on_time, late = "s/t/20240301-1100000000.csv", "s/t/20240301-1130000000.csv"
    for key in (on_time, late):
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(b"I,1\n")
    at_its_time = datetime(2024, 3, 1, 11, 0, 30, tzinfo=UTC).timestamp()
    os.utime(tmp_path / on_time, (at_its_time, at_its_time))
    # WHEN their events are noted
    follower.note(on_time)
    follower.note(late)
    # THEN the one written on time is applied (the watermark covers it); the late one is pending, in the index
    state = follower.states["s.t"]
    assert on_time in state.applied and on_time not in follower.index.files
    assert late not in state.applied and late in follower.index.files
    assert [f.key for f in state.pending(follower.index.listing().files)] == [late]


def test_unconfigured_tables_are_found_from_the_folders_alone_on_s3_and_on_disk(s3_client: Any, tmp_path: Path) -> None:
    # GIVEN a configured table and an unconfigured one, with date folders and files, on S3 and on disk
    names = ["s/t/2024/03/01/20240301-0000000000.csv", "other/table/LOAD00000001.csv", "other/table/2024/x.csv"]
    for name in names:
        put(s3_client, name)
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    counting = CountingS3(s3_client)
    on_s3 = Engine(spark=None, config=CONFIG, store=S3Bronze(counting, BUCKET, "dms"))  # type: ignore[arg-type]
    on_disk = Engine(spark=None, config=CONFIG, store=LocalBronze(tmp_path))  # type: ignore[arg-type]
    # WHEN the run looks for unconfigured sources
    # THEN both stores name the unconfigured table, from a request per schema folder (and the root)
    assert unconfigured_sources(on_s3) == ["other.table"] == unconfigured_sources(on_disk)
    assert len(counting.listed) == 3

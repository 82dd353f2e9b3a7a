"""engine/select.py: which bronze files each table still needs (pure: no Spark, no table)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cdclake.config import BronzeSettings, PipelineConfig, TableConfig
from cdclake.dms.files import BronzeFile, classify, parse_key
from cdclake.dms.store import LocalBronze
from cdclake.engine.select import (
    ReplaySelection,
    TableState,
    batches,
    file_name_stamp,
    files_from_keys,
    group_by_table,
    load_due,
    loaded_files,
    skip_reason,
    superseded_cdc_files,
    unloaded_load_files,
)
from cdclake.errors import BronzeError, ConfigError, LoadFilesConflictError
from cdclake.lake.ledger_record import LoadedFile
from cdclake.report import RunReport

ORDERS = TableConfig("sales", "orders", "orders", primary_key=("id",))
EVENTS = TableConfig("sales", "events", "events", append_only=True)
NOTES = TableConfig("sales", "notes", "notes")  # no key, not append-only


def file(key: str, size: int = 10, version: str | None = None) -> BronzeFile:
    return replace(parse_key(key, size), version=version)


def config(*tables: TableConfig) -> PipelineConfig:
    return PipelineConfig(bronze=BronzeSettings(), database="silver", tables=tables)


LOAD1 = "sales/orders/LOAD00000001.csv"
LOAD2 = "sales/orders/LOAD00000002.csv"
CDC_A = "sales/orders/20240301-1200000000.csv"
CDC_B = "sales/orders/20240301-1300000000.csv"
CDC_C = "sales/orders/20240302-0900000000.csv"


def loaded_state(*files: BronzeFile, applied: tuple[str, ...] = ()) -> TableState:
    state = TableState.after_load(files, held=frozenset())
    return state.after(applied=applied)


# --- TableState -------------------------------------------------------------------------------


def test_pending_leaves_out_applied_and_held_files_and_sorts_in_apply_order() -> None:
    state = TableState(False, applied=frozenset({CDC_A}), held=frozenset({CDC_B}))
    files = [file(CDC_C), file(CDC_B), file(CDC_A), file(LOAD2), file(LOAD1)]

    assert [f.key for f in state.pending(files)] == [LOAD1, LOAD2, CDC_C]
    assert [f.key for f in state.pending(files, force=True)] == [LOAD1, LOAD2, CDC_A, CDC_B, CDC_C]


def test_after_a_replay_applies_held_keys_they_leave_the_quarantine() -> None:
    state = TableState(True, applied=frozenset(), held=frozenset({CDC_A, CDC_B}), snapshot_id=7)

    after = state.after(applied=[CDC_A], held=[CDC_C], released=[CDC_B])

    assert after.applied == {CDC_A}
    assert after.held == {CDC_C}
    assert after.snapshot_id == 7  # no commit made: the state still describes snapshot 7
    assert state.after(applied=[CDC_C], snapshot_id=8).snapshot_id == 8


def test_after_load_records_load_files_with_size_and_version_and_superseded_cdc_by_key() -> None:
    state = TableState.after_load([file(LOAD1, 5, "v1"), file(CDC_A, 9, "x")], frozenset({CDC_B}), snapshot_id=3)

    assert state.full_load_done
    assert state.applied == {LOAD1, CDC_A}
    assert state.held == {CDC_B}
    assert state.loaded == {LOAD1: LoadedFile(LOAD1, 5, "v1"), CDC_A: LoadedFile(CDC_A)}
    assert not state.cdc_applied  # what the load recorded is not CDC applied since
    assert state.after(applied=[CDC_B]).cdc_applied


def test_loaded_files_keeps_size_and_version_only_for_load_files() -> None:
    assert loaded_files([file(LOAD1, 4, "a"), file(CDC_A, 6, "b")]) == (LoadedFile(LOAD1, 4, "a"), LoadedFile(CDC_A))


# --- which LOAD files a loaded table lacks ----------------------------------------------------


def test_before_a_full_load_no_load_file_is_unloaded() -> None:
    assert unloaded_load_files(TableState(False, frozenset(), frozenset()), [file(LOAD1)]) == []


@pytest.mark.parametrize(
    ("recorded", "now", "unloaded"),
    [
        pytest.param(LoadedFile(LOAD1, 10, "v1"), file(LOAD1, 10, "v1"), False, id="same-size-same-version"),
        pytest.param(LoadedFile(LOAD1, 10, "v1"), file(LOAD1, 11, "v1"), True, id="written-again-other-size"),
        pytest.param(LoadedFile(LOAD1, 10, "v1"), file(LOAD1, 10, "v2"), True, id="written-again-in-place"),
        pytest.param(LoadedFile(LOAD1, 10, None), file(LOAD1, 10, "v2"), False, id="ledger-without-version"),
        pytest.param(LoadedFile(LOAD1, 10, "v1"), file(LOAD1, 10, None), False, id="listing-without-version"),
        pytest.param(LoadedFile(LOAD1), file(LOAD1, 99, "v9"), False, id="ledger-without-size"),
    ],
)
def test_a_load_file_is_unloaded_when_its_size_or_version_tells_it_from_the_recorded_one(
    recorded: LoadedFile, now: BronzeFile, unloaded: bool
) -> None:
    state = TableState(True, frozenset({LOAD1}), frozenset(), {LOAD1: recorded})

    assert unloaded_load_files(state, [now]) == ([now] if unloaded else [])


# --- load_due / load_again ----------------------------------------------------------------------


def test_a_table_never_loaded_is_due_a_load_only_when_bronze_holds_load_files() -> None:
    fresh = TableState(False, frozenset(), frozenset())

    assert load_due(ORDERS, fresh, []) is None
    assert load_due(ORDERS, fresh, [file(LOAD1), file(LOAD2)]) == "not loaded yet: 2 LOAD file(s) in bronze"


def test_a_loaded_table_with_every_load_file_recorded_is_not_due() -> None:
    state = loaded_state(file(LOAD1), applied=(CDC_A,))

    assert load_due(ORDERS, state, [file(LOAD1)]) is None


def test_new_load_files_before_any_cdc_complete_the_load() -> None:
    state = loaded_state(file(LOAD1))

    reason = load_due(ORDERS, state, [file(LOAD1), file(LOAD2)])

    assert reason == "LOAD files new since the full load, loaded with the others: LOAD00000002.csv"


def test_every_load_file_written_again_after_cdc_is_a_reload() -> None:
    state = loaded_state(file(LOAD1, 10), file(LOAD2, 10), applied=(CDC_A,))

    reason = load_due(ORDERS, state, [file(LOAD1, 12), file(LOAD2, 13)])

    assert reason == (
        "a reload: LOAD files written again since the full load replace the table: LOAD00000001.csv, LOAD00000002.csv"
    )


def test_new_load_files_beside_loaded_ones_after_cdc_are_a_conflict_naming_both_and_the_command() -> None:
    state = loaded_state(file(LOAD1, 10), applied=(CDC_A,))

    with pytest.raises(LoadFilesConflictError) as raised:
        load_due(ORDERS, state, [file(LOAD1, 10), file(LOAD2, 10)])

    message = str(raised.value)
    assert "(LOAD00000002.csv) beside ones it loaded (LOAD00000001.csv)" in message
    assert "cdclake full-load --table sales.orders --reload" in message


# --- grouping a listing by table ----------------------------------------------------------------


def test_skip_reason_only_for_a_table_without_key_that_is_not_append_only() -> None:
    assert skip_reason(ORDERS) is None
    assert skip_reason(EVENTS) is None
    reason = skip_reason(NOTES)
    assert reason is not None and reason.startswith("sales.notes has no primary key: skipped")


def test_group_by_table_reports_unconfigured_and_skipped_sources_once_each() -> None:
    report = RunReport()
    files = [
        file(CDC_B),
        file(CDC_A),
        file("sales/events/20240301-1200000000.csv"),
        file("sales/notes/20240301-1200000000.csv"),
        file("sales/notes/20240301-1300000000.csv"),
        file("hr/staff/20240301-1200000000.csv"),
        file("hr/staff/20240301-1300000000.csv"),
    ]

    grouped = group_by_table(config(ORDERS, EVENTS, NOTES), files, report)

    assert [(table.source, [f.key for f in chosen]) for table, chosen in grouped] == [
        ("sales.events", ["sales/events/20240301-1200000000.csv"]),
        ("sales.orders", [CDC_A, CDC_B]),
    ]
    assert report.unconfigured == ["hr.staff"]
    assert report.skipped_tables == [skip_reason(NOTES)]


def test_a_transaction_file_goes_to_every_table_that_can_be_mirrored() -> None:
    transaction = parse_key("txn/20240301-1230000000.csv", 10, transaction_path="txn")
    report = RunReport()

    grouped = group_by_table(config(ORDERS, NOTES, EVENTS), [file(CDC_B), transaction, file(CDC_A)], report)

    by_table = {table.source: [f.key for f in chosen] for table, chosen in grouped}
    assert by_table == {"sales.orders": [CDC_A, transaction.key, CDC_B], "sales.events": [transaction.key]}
    assert report.skipped_tables == []  # a transaction file names no table: nothing is reported skipped


# --- CDC files a full load supersedes -----------------------------------------------------------


def test_cdc_files_written_before_the_load_watermark_are_superseded() -> None:
    listing = classify([(LOAD1, 1), (CDC_A, 1), (CDC_B, 1), (CDC_C, 1), ("sales/events/20240301-1100000000.csv", 1)])

    superseded = superseded_cdc_files(listing, ORDERS, "2024-03-01 13:00:00.000000")

    # CDC_B was written at the watermark itself, after the load started reading: not superseded
    assert [f.key for f in superseded] == [CDC_A]
    assert superseded_cdc_files(listing, ORDERS, None) == []
    assert superseded_cdc_files(listing, ORDERS, "") == []


# --- replays ------------------------------------------------------------------------------------


def test_file_name_stamp_is_the_dms_cdc_name_prefix() -> None:
    assert file_name_stamp("2024-03-01T12:05") == "20240301-120500"
    assert file_name_stamp("2024-03-01T12:05:09") == "20240301-120509"
    assert file_name_stamp(None) is None
    with pytest.raises(ConfigError, match="'yesterday' is not a time like 2024-03-01T12:00"):
        file_name_stamp("yesterday")


def test_a_replay_range_includes_its_start_and_excludes_its_end() -> None:
    files = [file(CDC_A), file(CDC_B), file(CDC_C)]

    chosen = ReplaySelection(since="2024-03-01T12:00", until="2024-03-02T09:00").choose(files, frozenset())

    assert [f.key for f in chosen] == [CDC_A, CDC_B]


def test_a_replay_of_the_quarantine_and_named_keys_takes_only_files_both_choose() -> None:
    files = [file(CDC_A), file(CDC_B), file(CDC_C)]
    held = frozenset({CDC_B, CDC_C})

    assert [f.key for f in ReplaySelection(quarantined=True).choose(files, held)] == [CDC_B, CDC_C]
    both = ReplaySelection(keys=frozenset({CDC_A, CDC_B}), quarantined=True).choose(files, held)
    assert [f.key for f in both] == [CDC_B]
    assert ReplaySelection().choose(files, held) == files


# --- batches ------------------------------------------------------------------------------------


def sized(*sizes: int) -> list[BronzeFile]:
    return [file(f"sales/orders/20240301-12{minute:02d}000000.csv", size) for minute, size in enumerate(sizes)]


def test_batches_cut_by_count_in_order() -> None:
    files = sized(1, 1, 1, 1, 1)

    assert batches(files, 2) == [files[0:2], files[2:4], files[4:5]]
    assert batches([], 2) == []


def test_batches_cut_by_bytes_and_a_file_over_the_limit_is_a_batch_of_its_own() -> None:
    files = sized(40, 50, 30, 200, 10, 10)

    assert [[f.size for f in batch] for batch in batches(files, 10, max_bytes=100)] == [[40, 50], [30], [200], [10, 10]]


# --- keys named on the command line -------------------------------------------------------------


def test_files_from_keys_takes_relative_keys_and_paths_under_the_root_with_sizes_from_the_store(
    tmp_path: Path,
) -> None:
    (tmp_path / "sales" / "orders").mkdir(parents=True)
    (tmp_path / CDC_A).write_bytes(b"abc")
    (tmp_path / CDC_B).write_bytes(b"abcdef")
    store = LocalBronze(tmp_path)

    files = files_from_keys(store, [f"{tmp_path}/{CDC_B}", f"/{CDC_A}"])

    assert [(f.key, f.size) for f in files] == [(CDC_B, 6), (CDC_A, 3)]
    with pytest.raises(BronzeError, match=f"The CDC file {CDC_C} is not in bronze"):
        files_from_keys(store, [CDC_C])

"""Which LOAD files a loaded table's full load does not hold, and what a run does about them (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cdclake.config import BronzeSettings, CleaningRules, TableConfig
from cdclake.dms.files import BronzeFile, parse_key
from cdclake.dms.layout import undeclared_header_columns
from cdclake.engine.select import TableState, load_again, loaded_files, unloaded_load_files
from cdclake.errors import LoadFilesConflictError
from cdclake.lake.ledger_record import KIND_FULL_LOAD, LedgerRecord, LoadedFile

TABLE = TableConfig(source_schema="s", source_table="t", target="t", columns={"id": "int", "qty": "int"})
LOAD1, LOAD2, CDC = "s/t/LOAD00000001.csv", "s/t/LOAD00000002.csv", "s/t/20240102-0000000000.csv"


def _load(key: str, size: int) -> BronzeFile:
    return parse_key(key, size)


def _loaded(sizes: dict[str, int | None], applied: tuple[str, ...] = ()) -> TableState:
    loaded = {key: LoadedFile(key, size) for key, size in sizes.items()}
    return TableState(True, frozenset(sizes) | frozenset(applied), frozenset(), loaded)


def test_a_load_file_is_unloaded_when_new_or_written_again_with_another_size() -> None:
    # GIVEN a load of LOAD1 (10 bytes) and LOAD2 recorded by a ledger without sizes
    state = _loaded({LOAD1: 10, LOAD2: None})
    # WHEN bronze holds LOAD1 at 11 bytes, LOAD2 at any size and a new LOAD3
    loads = [_load(LOAD1, 11), _load(LOAD2, 99), _load("s/t/LOAD00000003.csv", 5)]
    # THEN LOAD1 (another size) and LOAD3 (new) are unloaded; LOAD2 is judged by its name only
    assert [f.name for f in unloaded_load_files(state, loads)] == ["LOAD00000001.csv", "LOAD00000003.csv"]
    # AND before any full load nothing counts as unloaded (the whole load is pending)
    assert unloaded_load_files(TableState(False, frozenset(), frozenset()), loads) == []


def test_late_load_files_are_loaded_before_cdc_a_reload_after_it_and_a_mix_is_refused() -> None:
    # no CDC since the load: the new file completes it
    assert load_again(TABLE, _loaded({LOAD1: 10}), [_load(LOAD1, 10), _load(LOAD2, 4)]) == (
        "LOAD files new since the full load, loaded with the others: LOAD00000002.csv"
    )
    # the CDC files a load superseded are not CDC applied since
    assert load_again(TABLE, _loaded({LOAD1: 10, CDC: None}), [_load(LOAD2, 4)]) == (
        "LOAD files new since the full load, loaded with the others: LOAD00000002.csv"
    )
    # CDC since, every LOAD file written again: a reload
    assert load_again(TABLE, _loaded({LOAD1: 10}, (CDC,)), [_load(LOAD1, 12)]) == (
        "a reload: LOAD files written again since the full load replace the table: LOAD00000001.csv"
    )
    # nothing new: None
    assert load_again(TABLE, _loaded({LOAD1: 10}, (CDC,)), [_load(LOAD1, 10)]) is None
    # CDC since, a new file beside an unchanged loaded one: refused with the command
    with pytest.raises(LoadFilesConflictError, match=r"run `cdclake full-load --table s\.t --reload`"):
        load_again(TABLE, _loaded({LOAD1: 10}, (CDC,)), [_load(LOAD1, 10), _load(LOAD2, 4)])


def test_a_full_load_records_its_files_as_ledgers_always_have() -> None:
    # GIVEN the files a full load records: a LOAD file with a version, one without, a superseded CDC file
    recorded = loaded_files([replace(_load(LOAD1, 10), version="v1"), _load(LOAD2, 4), _load(CDC, 7)])
    # WHEN they are recorded in a snapshot summary
    properties = LedgerRecord(KIND_FULL_LOAD, recorded).properties()
    # THEN the properties are the ones ledgers in existing warehouses hold (a CDC file's size is not kept)
    assert properties == {
        "cdclake.kind": "full-load",
        "cdclake.files": f'["{LOAD1}","{LOAD2}","{CDC}"]',
        "cdclake.load-sizes": f'{{"{LOAD1}":10,"{LOAD2}":4}}',
        "cdclake.load-versions": f'{{"{LOAD1}":"v1"}}',
    }
    # AND a load of no files records an empty list and no sizes
    assert LedgerRecord(KIND_FULL_LOAD, ()).properties() == {
        "cdclake.kind": "full-load",
        "cdclake.files": "[]",
        "cdclake.load-sizes": "{}",
    }


def test_a_header_contradicts_declared_columns_only_with_undeclared_names() -> None:
    settings = BronzeSettings(timestamp_column="ts", change_sequence_column="seq")
    cast = TableConfig(
        source_schema="s",
        source_table="t",
        target="t",
        columns=TABLE.columns,
        clean=CleaningRules(cast={"note": "string"}),
    )
    # a renamed column: the new name is undeclared, the declared one is missing
    assert undeclared_header_columns(settings, TABLE, ("Op", "ts", "id", "quantity", "seq")) == (["quantity"], ["qty"])
    # a dropped column alone, bookkeeping and cast columns, other letter case: no contradiction
    assert undeclared_header_columns(settings, TABLE, ("op", "TS", "ID", "seq")) == ([], ["qty"])
    assert undeclared_header_columns(settings, cast, ("Op", "ts", "id", "qty", "note")) == ([], [])
    # no declared columns: headers are followed
    bare = TableConfig(source_schema="s", source_table="t", target="t")
    assert undeclared_header_columns(settings, bare, ("Op", "anything")) == ([], [])

"""``LedgerRecord``: a commit's ledger entry to snapshot-summary properties and back (pure)."""

from __future__ import annotations

from cdclake.lake.ledger_record import KIND_CDC, KIND_FULL_LOAD, KIND_FULL_LOAD_STAGED, LedgerRecord, LoadedFile

LOAD1, LOAD2, CDC = "s/t/LOAD00000001.csv", "s/t/LOAD00000002.csv", "s/t/20240102-0000000000.csv"


def test_a_cdc_batch_records_its_files_and_commit_time_and_reads_back_equal() -> None:
    # GIVEN a CDC batch of two files with its newest source commit time
    record = LedgerRecord.batch([CDC, "s/t/20240103-0000000001.csv"], "2024-01-03 10:00:00")
    # WHEN it is written as snapshot-summary properties
    properties = record.properties()
    # THEN they are the properties ledgers in existing warehouses hold (no sizes for CDC files)
    assert properties == {
        "cdclake.kind": "cdc",
        "cdclake.files": f'["{CDC}","s/t/20240103-0000000001.csv"]',
        "cdclake.latest-commit-ts": "2024-01-03 10:00:00",
    }
    # AND the summary reads back as the same record
    assert LedgerRecord.from_summary(properties) == record
    # AND a batch without a commit time records none
    assert "cdclake.latest-commit-ts" not in LedgerRecord.batch([CDC]).properties()


def test_a_full_load_round_trips_its_sizes_and_versions() -> None:
    # GIVEN a staged full load: a LOAD file with a version, one without, a superseded CDC file
    files = (LoadedFile(LOAD1, 10, "v1"), LoadedFile(LOAD2, 4), LoadedFile(CDC))
    for kind in (KIND_FULL_LOAD_STAGED, KIND_FULL_LOAD):
        record = LedgerRecord(kind, files)
        # WHEN written and read back THEN every file keeps its size and version
        assert LedgerRecord.from_summary(record.properties()) == record
        assert record.keys == (LOAD1, LOAD2, CDC)
    # AND the properties keep the sizes of the sized files and the versions of the versioned ones
    properties = LedgerRecord(KIND_FULL_LOAD, files).properties()
    assert properties["cdclake.load-sizes"] == f'{{"{LOAD1}":10,"{LOAD2}":4}}'
    assert properties["cdclake.load-versions"] == f'{{"{LOAD1}":"v1"}}'


def test_a_summary_without_a_record_or_from_an_older_ledger_reads_as_what_it_holds() -> None:
    # a commit that recorded nothing (maintenance, another writer): no record
    assert LedgerRecord.from_summary({"operation": "replace", "total-records": "7"}) is None
    assert LedgerRecord.from_summary({"cdclake.kind": ""}) is None
    # a full load from before sizes and versions were kept: its files with both unknown
    old = {"cdclake.kind": "full-load", "cdclake.files": f'["{LOAD1}"]', "spark.app.id": "local-1"}
    assert LedgerRecord.from_summary(old) == LedgerRecord(KIND_FULL_LOAD, (LoadedFile(LOAD1),))
    # a record with no files property: a record of no files; an empty commit time is no commit time
    assert LedgerRecord.from_summary({"cdclake.kind": "cdc", "cdclake.latest-commit-ts": ""}) == LedgerRecord(
        KIND_CDC, ()
    )
    # a kind this version does not know is kept as it is, and written back unchanged
    newer = {"cdclake.kind": "compaction", "cdclake.files": "[]"}
    record = LedgerRecord.from_summary(newer)
    assert record is not None and record.kind == "compaction"
    assert record.properties() == newer

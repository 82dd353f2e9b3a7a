"""``IcebergTable``: the typed handle reads snapshots, lineage and properties, and commits metadata."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

from pyspark.sql import Row, SparkSession

from cdclake.lake.iceberg import DATA, POSITION_DELETES, IcebergTable, Snapshot
from cdclake.lake.ledger_record import KIND_CDC, KIND_PROPERTY, LedgerRecord
from cdclake.lake.tables import SilverTable, committed_by_spark


def _table(spark: SparkSession) -> str:
    database = f"silver.handle_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE NAMESPACE {database}")
    identifier = f"{database}.t"
    spark.sql(f"CREATE TABLE {identifier} (id int, v string) USING iceberg")
    return identifier


def test_the_handle_reads_each_commit_as_a_typed_snapshot_newest_first(spark: SparkSession) -> None:
    # GIVEN a new table: no snapshot
    identifier = _table(spark)
    handle = IcebergTable.latest(spark, identifier)
    assert handle.current_snapshot_id is None and handle.current() is None and list(handle.lineage()) == []
    # WHEN two inserts and an empty commit recording a ledger entry land
    before = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=1)
    spark.sql(f"INSERT INTO {identifier} VALUES (1, 'a')")
    spark.sql(f"INSERT INTO {identifier} VALUES (2, 'b'), (3, 'c')")
    record = LedgerRecord.batch(["s/t/20240101-1.csv"], "2024-01-01 00:00:00")
    IcebergTable.latest(spark, identifier).append_nothing(record.properties())
    # THEN the refreshed handle reads them
    lineage = list(handle.refresh().lineage(("total-records", KIND_PROPERTY)))
    # AND the lineage is the three commits, newest first, each the parent of the one before
    assert len(lineage) == 3 and handle.snapshot_count() == 3
    assert lineage[0].snapshot_id == handle.current_snapshot_id
    assert [s.parent_id for s in lineage] == [lineage[1].snapshot_id, lineage[2].snapshot_id, None]
    assert [s.sequence_number for s in lineage] == [3, 2, 1]
    # AND each snapshot holds the summary entries asked for (those it has), its totals among them
    assert [s.summary.get("total-records") for s in lineage] == ["3", "3", "1"]
    assert [s.summary.get(KIND_PROPERTY) for s in lineage] == [KIND_CDC, None, None]
    current = handle.current(None)  # the whole summary
    assert current is not None and LedgerRecord.from_summary(current.summary) == record
    assert all(before <= s.committed_at <= datetime.now(UTC).replace(tzinfo=None) for s in lineage)
    # AND a snapshot is found by id (None for one this table does not have), the lineage from it
    assert handle.snapshot(lineage[1].snapshot_id) == Snapshot(
        lineage[1].snapshot_id, 2, lineage[2].snapshot_id, lineage[1].timestamp_millis, {}
    )
    assert handle.snapshot(12345) is None
    assert [s.snapshot_id for s in handle.lineage(start=lineage[1].snapshot_id)] == [
        lineage[1].snapshot_id,
        lineage[2].snapshot_id,
    ]
    assert sorted(s.snapshot_id for s in handle.snapshots()) == sorted(s.snapshot_id for s in lineage)


def test_the_handle_sets_properties_and_expires_snapshots(spark: SparkSession) -> None:
    # GIVEN a table with three commits
    identifier = _table(spark)
    for value in range(3):
        spark.sql(f"INSERT INTO {identifier} VALUES ({value}, 'x')")
    handle = IcebergTable.latest(spark, identifier)
    # WHEN a property is set THEN another handle reads it, and an unset one is None
    assert handle.property("cdclake.test") is None
    handle.set_property("cdclake.test", "42")
    assert IcebergTable.latest(spark, identifier).property("cdclake.test") == "42"
    # WHEN every snapshot older than now expires but the last two THEN two are left, the current first
    newest_two = [s.snapshot_id for s in handle.refresh().lineage()][:2]
    handle.expire_snapshots(datetime.now(UTC) + timedelta(seconds=1), retain_last=2)
    after = IcebergTable.latest(spark, identifier)
    assert after.snapshot_count() == 2
    assert [s.snapshot_id for s in after.lineage()] == newest_two
    # AND the table's location holds files created before a minute from now, none from an hour ago
    assert after.holds_file_created_before(spark, datetime.now(UTC) + timedelta(minutes=1))
    assert not after.holds_file_created_before(spark, datetime.now(UTC) - timedelta(hours=1))
    assert after.metadata_location.endswith(".metadata.json") and after.first_column == "id"


def test_the_handle_nets_the_files_snapshots_added_and_removed(spark: SparkSession) -> None:
    # GIVEN a merge-on-read table: an insert (file A), another (file B), a delete of one row of A
    # (a position delete file), then B removed
    identifier = _table(spark)
    spark.sql(
        f"ALTER TABLE {identifier} SET TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read')"
    )
    spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string").coalesce(1).writeTo(identifier).append()
    spark.sql(f"INSERT INTO {identifier} VALUES (3, 'c')")
    spark.sql(f"DELETE FROM {identifier} WHERE id = 1")
    files = {r["id"]: (r["file_path"], r["file_size_in_bytes"]) for r in _data_files(spark, identifier)}
    (path_a, size_a), (path_b, _) = files[1], files[3]
    handle = IcebergTable.latest(spark, identifier)
    first, second, deleted = reversed([s.snapshot_id for s in handle.lineage()])
    (added_b,) = handle.net_files([second]).added_data
    delete = handle.java.newDelete()
    delete.deleteFile(added_b.java)  # Iceberg's own entry, as lake/ commits it again
    delete.commit()
    removed = handle.refresh().current_snapshot_id
    assert removed is not None
    # WHEN the snapshots after the first are listed and their files netted
    after_first = handle.snapshots_after(first, removed)
    # THEN they are the three later commits, newest first, and none lead back from the first to a later one
    assert after_first == [removed, deleted, second]
    assert handle.snapshots_after(removed, first) is None
    # AND B, added and removed again among them, is in neither list; the delete file points into A
    net = handle.net_files(after_first)
    assert net.added_data == net.removed_data == net.removed_deletes == ()
    (delete_file,) = net.added_deletes
    assert (delete_file.content, delete_file.records, delete_file.referenced) == (POSITION_DELETES, 1, path_a)
    # AND the last commit alone removed B; the second alone added it
    assert [f.path for f in handle.net_files([removed]).removed_data] == [path_b]
    assert (added_b.path, added_b.content, added_b.records) == (path_b, DATA, 1)
    # AND the first snapshot's scan plans A alone, with its size
    assert [(t.path, t.size) for t in handle.planned_files(first)] == [(path_a, size_a)]


def _data_files(spark: SparkSession, identifier: str) -> list[Row]:
    """Each data file of the current snapshot with the first id it holds (the ``files`` table)."""
    return spark.sql(
        f"SELECT file_path, file_size_in_bytes, readable_metrics.id.lower_bound AS id FROM {identifier}.data_files"
    ).collect()


def _rival(spark: SparkSession, identifier: str, value: int) -> None:
    """Another writer's commit: an insert from a thread of its own (no commit properties of ours)."""
    thread = threading.Thread(target=lambda: spark.sql(f"INSERT INTO {identifier} VALUES ({value}, 'rival')"))
    thread.start()
    thread.join()


def test_a_commit_returns_the_snapshot_it_made_whoever_commits_around_it(spark: SparkSession) -> None:
    # GIVEN a table with one row
    identifier = _table(spark)
    spark.sql(f"INSERT INTO {identifier} VALUES (1, 'a')")
    handle = IcebergTable.latest(spark, identifier)
    record = LedgerRecord.batch(["s/t/20240101-1.csv"], "2024-01-01 00:00:00").properties()
    # WHEN a commit through the Java API (an empty append recording a ledger entry) is followed by a rival's
    made = handle.append_nothing(record)
    _rival(spark, identifier, 2)
    # THEN the commit returned its own snapshot, not the table's current one
    current = IcebergTable.latest(spark, identifier).current(None)
    assert current is not None and current.parent_id == made.snapshot_id != current.snapshot_id
    assert made == IcebergTable.latest(spark, identifier).snapshot(made.snapshot_id, None)
    assert LedgerRecord.from_summary(made.summary) == LedgerRecord.from_summary(record)


def test_a_spark_write_is_found_by_its_properties_among_the_commits_since_it_began(spark: SparkSession) -> None:
    # GIVEN a table, and three Spark writes carrying a ledger record each: one alone, one a rival commits
    # after (inside the write, before it is looked for), one a rival commits before
    identifier = _table(spark)
    catalog, database, name = identifier.split(".")
    silver = SilverTable(catalog, database, name)
    records = [LedgerRecord.batch([f"s/t/20240101-{n}.csv"], "2024-01-01 00:00:00").properties() for n in (1, 2, 3)]

    def ours(value: int) -> None:
        spark.sql(f"INSERT INTO {identifier} VALUES ({value}, 'ours')")

    def ours_then_rival() -> None:
        ours(20)
        _rival(spark, identifier, 21)

    def rival_then_ours() -> None:
        _rival(spark, identifier, 30)
        ours(31)

    # WHEN each is committed and its snapshot looked for
    alone = committed_by_spark(spark, silver, records[0], lambda: ours(10))
    overtaken = committed_by_spark(spark, silver, records[1], ours_then_rival)
    late = committed_by_spark(spark, silver, records[2], rival_then_ours)
    # THEN each is the snapshot that added its own row and carries its own record
    handle = IcebergTable.latest(spark, identifier)
    for made, record, value in ((alone, records[0], 10), (overtaken, records[1], 20), (late, records[2], 31)):
        assert {k: made.summary[k] for k in record} == record
        added = spark.sql(f"SELECT id FROM {identifier} VERSION AS OF {made.snapshot_id}").collect()
        before = (
            ()
            if made.parent_id is None
            else spark.sql(f"SELECT id FROM {identifier} VERSION AS OF {made.parent_id}").collect()
        )
        assert {r["id"] for r in added} - {r["id"] for r in before} == {value}
    # AND the rivals' commits were not taken for ours: the overtaken write is not the current snapshot
    assert handle.current_snapshot_id == late.snapshot_id != overtaken.snapshot_id
    assert late.parent_id != overtaken.snapshot_id  # the rival committed between them

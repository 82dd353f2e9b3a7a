"""The applied-files ledger: which bronze files silver holds, kept in Iceberg snapshot summaries.

The ledger lives in the snapshot summaries of the very commits that apply the files
(``cdclake.kind`` and ``cdclake.files``), set through Iceberg's ``CommitMetadata``. A crash after a
commit and before the queue is acknowledged therefore cannot lose the record of what was applied,
and re-applying the same files is recognised and skipped. Snapshots that maintenance expires
leave their entries in the ``cdclake_ledger`` archive first. What one commit records, and the
compacted form a checkpoint carries, are ``ledger_record``'s; this module reads a table's lineage and
its archive, and writes the commits and the archive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cdclake.identifiers import sql_string
from cdclake.lake.iceberg import IcebergTable, Snapshot
from cdclake.lake.ledger_record import (
    CHECKPOINT_PROPERTY,
    FILES_PROPERTY,
    KIND_CDC,
    KIND_FULL_LOAD,
    KIND_FULL_LOAD_STAGED,
    KIND_PROPERTY,
    LOAD_SIZES_PROPERTY,
    LOAD_VERSIONS_PROPERTY,
    AppliedKeys,
    LedgerCheckpoint,
    LedgerRecord,
    LineageEntry,
    LoadedFile,
    SnapshotRef,
    lineage_entries,
)
from cdclake.lake.tables import (
    SilverTable,
    create_or_replace,
    ensure_table,
    merge_frame,
    table_exists,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LEDGER_ARCHIVE_TABLE = "cdclake_ledger"


@dataclass(frozen=True)
class LedgerState:
    """What the current snapshot lineage says about one table."""

    full_load_done: bool
    applied: AppliedKeys  # bronze keys applied since (and including) the last full load
    last_file: str | None
    # what the last full load recorded, by key: its LOAD files and the CDC files it superseded
    loaded: Mapping[str, LoadedFile] = field(default_factory=dict)
    # the snapshot whose lineage was read (None: no table, or no snapshot): a batch planned from
    # this ledger commits only while the table is still at it (``engine.cdc``). Where it was read,
    # not what it says: two reads with the same entries are equal (a compaction between them changes
    # no entry)
    snapshot_id: int | None = field(default=None, compare=False)
    # CDC files were applied since the last full load (None: whatever ``applied`` names beyond ``loaded``)
    cdc_applied: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "applied", AppliedKeys.of(self.applied))


_LINEAGE_KEYS = (
    KIND_PROPERTY, FILES_PROPERTY, LOAD_SIZES_PROPERTY, LOAD_VERSIONS_PROPERTY, "total-records", CHECKPOINT_PROPERTY
)  # fmt: skip


def _lineage(spark: SparkSession, table: SilverTable) -> Iterator[LineageEntry]:
    """Ancestors of the current snapshot, newest first, with their ledger records.

    Read through the Iceberg Java API (parent pointers from the current snapshot back to the
    first one maintenance has not expired): table metadata only, no Spark job. Lazily: a reader
    that stops early (at a full load, at the snapshot it looks for) walks no further.
    """
    return lineage_entries(IcebergTable.latest(spark, table.identifier).lineage(_LINEAGE_KEYS))


@dataclass(frozen=True)
class BatchesAfter:
    """What a table's ledger holds after a given snapshot (``batches_after``)."""

    files: tuple[str, ...]  # the CDC files committed after it, in commit order
    newest: SnapshotRef | None  # the snapshot that committed the last of them
    load_after: bool  # a full load (finished or not) came after it: its files say nothing of what came before


def snapshot_ref(spark: SparkSession, table: SilverTable, snapshot_id: int) -> SnapshotRef:
    """``snapshot_id`` of ``table`` with its sequence number."""
    snapshot = IcebergTable.latest(spark, table.identifier).snapshot(snapshot_id)
    if snapshot is None:
        raise LookupError(f"{table.identifier} has no snapshot {snapshot_id}")
    return SnapshotRef(snapshot_id, snapshot.sequence_number)


def batches_after(spark: SparkSession, table: SilverTable, sequence_number: int) -> BatchesAfter:
    """The CDC files ``table`` committed after its snapshot of ``sequence_number``, in commit order:
    from the lineage (metadata only) and, for the part of it that maintenance expired, from the
    ledger archive. Stops at a full load: what came before it is another load's. A load's record
    (the empty commit after its staged replace) is not a load of its own."""
    files: list[str] = []
    newest: SnapshotRef | None = None
    reached = False
    newer: LineageEntry | None = None  # a load, held until its parent says whether it was a record
    for entry in _lineage(spark, table):
        if newer is not None and entry.kind != KIND_FULL_LOAD_STAGED:
            return BatchesAfter(tuple(_unique(files)), newest, load_after=True)  # a load of its own
        newer = None
        if entry.snapshot.sequence_number <= sequence_number:
            reached = True
            break
        if entry.kind == KIND_FULL_LOAD_STAGED:
            return BatchesAfter(tuple(_unique(files)), newest, load_after=True)
        if entry.kind == KIND_FULL_LOAD:
            newer = entry  # the record of a staged load (its parent), or a load of its own
            continue
        if entry.kind == KIND_CDC and entry.files:
            files[:0] = [f.key for f in entry.files]
            newest = newest or entry.snapshot
    archive = _ledger_archive(table)
    if not reached and table_exists(spark, archive) and "sequence_number" in spark.table(archive.identifier).columns:
        expired = (
            spark.table(archive.identifier)
            .where(f"silver_table = {sql_string(table.name)} AND sequence_number > {int(sequence_number)}")
            .orderBy("sequence_number", "file_key")
            .collect()
        )
        if any(e["kind"] == KIND_FULL_LOAD_STAGED for e in expired):
            return BatchesAfter(tuple(_unique(files)), newest, load_after=True)
        files[:0] = [e["file_key"] for e in expired if e["kind"] == KIND_CDC and e["file_key"]]
        if newest is None and expired:
            newest = SnapshotRef(expired[-1]["snapshot_id"], expired[-1]["sequence_number"])
    return BatchesAfter(tuple(_unique(files)), newest, load_after=False)


def newest_load(spark: SparkSession, table: SilverTable) -> tuple[SnapshotRef, int] | None:
    """The newest snapshot of the lineage that a full load made (its staged replace or its record,
    or a load of its own) with the rows silver held then; None when maintenance expired them all."""
    for entry in _lineage(spark, table):
        if entry.kind in (KIND_FULL_LOAD, KIND_FULL_LOAD_STAGED):
            return entry.snapshot, entry.total_records
    return None


def _unique(keys: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(keys))


def _ledger_archive(table: SilverTable) -> SilverTable:
    return SilverTable(table.catalog, table.database, LEDGER_ARCHIVE_TABLE)


def read_ledger(
    spark: SparkSession,
    table: SilverTable,
    archive: Mapping[str, Sequence[Any]] | None = None,
    whole: bool = False,
) -> LedgerState:
    """Walk the current snapshot lineage back to the newest checkpoint (``LedgerCheckpoint``, the
    compacted ledger a CDC commit carries) or the last full load, collecting applied files
    (``ledger_state``).

    Entries of snapshots that maintenance expired come from the ledger archive (``archive``: its
    rows per silver table, read once by a caller that reads many ledgers, ``read_ledger_archive``;
    None: read here when needed). ``whole``: pass over checkpoints and read every key applied since
    the full load (a sweep's exact reconciliation).
    """
    if not table_exists(spark, table):
        return LedgerState(full_load_done=False, applied=AppliedKeys(), last_file=None)

    def archived() -> Iterable[Mapping[str, Any]]:
        rows = _archived(spark, table) if archive is None else archive.get(table.name, ())
        return [row.asDict() for row in rows]  # Spark's rows

    return ledger_state(_lineage(spark, table), archived, whole)


def ledger_state(
    lineage: Iterable[LineageEntry], archived: Callable[[], Iterable[Mapping[str, Any]]], whole: bool = False
) -> LedgerState:
    """The ledger a table's lineage (newest first) records, back to the newest checkpoint or the
    last full load; then, when the lineage ends before a full load (expired), the ``archived``
    entries (rows of ``cdclake_ledger``, asked for only then). The one walk of the Spark path
    (``read_ledger``) and the no-JVM one (``ops.status_local``).

    Only ancestors of the current snapshot count: after a rollback, files applied by the
    rolled-back snapshots are pending again. A ledger without checkpoints (written before they
    were, or by a manifest's commits on an uncompacted state) is read back to the full load.
    ``whole``: pass over checkpoints."""
    applied: set[str] = set()
    loaded: dict[str, LoadedFile] = {}
    last_file: str | None = None
    full_load_done = False
    cdc_seen = False
    head: int | None = None
    for entry in lineage:
        head = entry.snapshot.snapshot_id if head is None else head
        if entry.kind == KIND_FULL_LOAD_STAGED:
            # A full load that never finished: whatever came before it no longer describes silver.
            return LedgerState(False, AppliedKeys.of(applied), last_file, snapshot_id=head)
        recorded = entry.files
        applied.update(f.key for f in recorded)
        if last_file is None and recorded:
            last_file = max(f.key for f in recorded)
        cdc_seen = cdc_seen or (entry.kind == KIND_CDC and bool(recorded))
        checkpoint = None if whole else LedgerCheckpoint.from_summary(entry.checkpoint)
        if checkpoint is not None:
            return LedgerState(
                checkpoint.full_load_done,
                checkpoint.applied | applied,
                last_file,
                checkpoint.loaded,
                snapshot_id=head,
                cdc_applied=checkpoint.cdc_applied or cdc_seen,
            )
        if entry.kind == KIND_FULL_LOAD:
            loaded = {f.key: f for f in recorded}
            full_load_done = True
            break
    if not full_load_done:
        for stored in archived():
            full_load_done = full_load_done or stored["kind"] == KIND_FULL_LOAD
            if stored["file_key"]:
                applied.add(stored["file_key"])
                if stored["kind"] == KIND_FULL_LOAD:
                    loaded[stored["file_key"]] = LoadedFile(
                        stored["file_key"], stored.get("file_size"), stored.get("file_version") or None
                    )
    cdc_applied = bool(applied - loaded.keys())
    return LedgerState(
        full_load_done, AppliedKeys.of(applied), last_file, loaded, snapshot_id=head, cdc_applied=cdc_applied
    )


def _archived(spark: SparkSession, table: SilverTable) -> list[Any]:
    """The archived ledger rows of ``table`` (none when there is no archive)."""
    archive = _ledger_archive(table)
    if not table_exists(spark, archive):
        return []
    return spark.table(archive.identifier).where(f"silver_table = {sql_string(table.name)}").collect()


def read_ledger_archive(spark: SparkSession, catalog: str, database: str) -> dict[str, list[Any]]:
    """Every table's archived ledger rows in ``database`` (one read), for ``read_ledger(archive=...)``."""
    archive = SilverTable(catalog, database, LEDGER_ARCHIVE_TABLE)
    entries: dict[str, list[Any]] = {}
    if table_exists(spark, archive):
        for entry in spark.table(archive.identifier).collect():
            entries.setdefault(entry["silver_table"], []).append(entry)
    return entries


def full_load_unfinished(spark: SparkSession, table: SilverTable) -> bool:
    """Whether the current lineage ends in a staged full load that was never recorded as done (a
    load that crashed before its record): the next run loads the table again."""
    for entry in _lineage(spark, table):
        if entry.kind == KIND_FULL_LOAD:
            return False
        if entry.kind == KIND_FULL_LOAD_STAGED:
            return True
    return False


def expiring_snapshots(
    spark: SparkSession, table: SilverTable, older_than: datetime, retain_last: int
) -> list[LineageEntry]:
    """The lineage snapshots (back to the last full load) that expiry at ``older_than`` removes."""
    lineage = []
    for entry in _lineage(spark, table):
        lineage.append(entry)
        if entry.kind == KIND_FULL_LOAD:
            break
    cutoff = older_than.replace(tzinfo=None)
    return [e for e in lineage[retain_last:] if e.committed_at < cutoff]


def archive_ledger(spark: SparkSession, table: SilverTable, snapshots: Sequence[LineageEntry]) -> int:
    """Copy the ledger entries of ``snapshots`` into ``cdclake_ledger``; return how many.

    Idempotent, and done before the snapshots expire, so the record of applied files survives.
    """
    rows = [
        (table.name, file.key, entry.kind, entry.snapshot.snapshot_id, file.size, entry.snapshot.sequence_number,
         file.version)
        for entry in snapshots
        for file in entry.files or [LoadedFile("")]
        if entry.kind
    ]  # fmt: skip
    if not rows:
        return 0
    archive = _ledger_archive(table)
    frame = spark.createDataFrame(
        rows,
        "silver_table string, file_key string, kind string, snapshot_id bigint, file_size bigint, "
        "sequence_number bigint, file_version string",
    )
    ensure_table(spark, archive, frame)
    stored = spark.table(archive.identifier).columns
    # an archive from before sizes (sequence numbers, LOAD file versions) were kept
    for column, kind in (("file_size", "bigint"), ("sequence_number", "bigint"), ("file_version", "string")):
        if column not in stored:
            spark.sql(f"ALTER TABLE {archive.identifier} ADD COLUMN {column} {kind}")
    merge_frame(
        spark,
        frame,
        lambda view: (
            f"MERGE INTO {archive.identifier} t USING {view} s "
            "ON t.silver_table = s.silver_table AND t.file_key = s.file_key AND t.kind = s.kind "
            "WHEN NOT MATCHED THEN INSERT *"
        ),
    )
    return len(rows)


def forget_archived_ledger(spark: SparkSession, table: SilverTable) -> None:
    """A new full load starts a new ledger: drop the archived entries of the old one."""
    archive = _ledger_archive(table)
    if table_exists(spark, archive):
        spark.sql(f"DELETE FROM {archive.identifier} WHERE silver_table = {sql_string(table.name)}")


def record_full_load(spark: SparkSession, table: SilverTable, loaded: Sequence[LoadedFile]) -> Snapshot:
    """Record a staged full load of ``loaded`` as done: a commit that adds no data, only the ledger
    entry (an append of no files through the Iceberg Java API, what an empty Spark append commits,
    without its Spark job); return its snapshot."""
    return IcebergTable.latest(spark, table.identifier).append_nothing(
        LedgerRecord(KIND_FULL_LOAD, tuple(loaded)).properties()
    )


def replace_table(
    spark: SparkSession,
    table: SilverTable,
    rows: DataFrame,
    loaded: Sequence[LoadedFile],
    kind: str = KIND_FULL_LOAD,
) -> Snapshot:
    """Create or atomically replace ``table`` with ``rows``: the full load of ``loaded``, recorded
    in the ledger (as ``kind``: a staged load is recorded as done only by ``record_full_load``
    after it); return the replace's snapshot."""
    return create_or_replace(spark, table, rows, LedgerRecord(kind, tuple(loaded)).properties())

"""The applied-files ledger: which bronze files silver holds, kept in Iceberg snapshot summaries.

The ledger lives in the snapshot summaries of the very commits that apply the files
(``cdclake.kind`` and ``cdclake.files``), set through Iceberg's ``CommitMetadata``. A crash after a
commit and before the queue is acknowledged therefore cannot lose the record of what was applied,
and re-applying the same files is recognised and skipped. Snapshots that maintenance expires
leave their entries in the ``cdclake_ledger`` archive first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cdclake.identifiers import sql_string
from cdclake.lake.iceberg import IcebergTable, Snapshot
from cdclake.lake.tables import (
    SilverTable,
    create_or_replace,
    ensure_table,
    merge_frame,
    table_exists,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KIND_PROPERTY = "cdclake.kind"
FILES_PROPERTY = "cdclake.files"
LATEST_COMMIT_TS_PROPERTY = "cdclake.latest-commit-ts"
# The sizes of a full load's LOAD files ({key: bytes}): a LOAD file DMS writes again under the same
# name (a reload restarts the counter) is told from the one loaded by its size.
LOAD_SIZES_PROPERTY = "cdclake.load-sizes"
# The versions of a full load's LOAD files ({key: modification time or ETag}): a LOAD file written
# again in place with the very same size (the "start from scratch" recovery) is told by its version.
LOAD_VERSIONS_PROPERTY = "cdclake.load-versions"
KIND_FULL_LOAD = "full-load"
# A full load's data commit, before the checks and steps that follow it (its layout, history, the
# old load's archived ledger and tombstones forgotten): the lineage says "not loaded" until the
# full-load commit after them, so a crash in between makes the next run load again.
KIND_FULL_LOAD_STAGED = "full-load-staged"
KIND_CDC = "cdc"
LEDGER_ARCHIVE_TABLE = "cdclake_ledger"
# A gold mart's refresh commit records the snapshots it read ({"database.table": snapshot id}):
# its next incremental refresh reads the changes since them, so maintenance keeps them.
MART_SOURCES_PROPERTY = "cdclake.gold.sources"
# A CDC batch's compacted ledger as it stood before the batch (``LedgerCheckpoint``): a reader stops
# at the newest snapshot that has one, so a ledger read costs the commits since, not the table's age.
CHECKPOINT_PROPERTY = "cdclake.ledger-checkpoint"
# A checkpoint naming more keys than this is not written (a ledger read the old way, not compacted
# yet): the snapshot summary stays small, and the reader walks back further.
CHECKPOINT_MAX_KEYS = 4096


@dataclass(frozen=True)
class AppliedKeys:
    """The bronze keys a table's ledger holds, compacted: per folder a watermark (a key), at or below
    which (in key order) every key is applied except the ``exceptions``, and the applied keys above
    their folder's watermark (or in a folder without one), each by name.

    The watermark is set only over a contiguous applied prefix of a listing of a time-ordered folder
    (``engine.select.compact_applied``), so a key at or below it that is not an exception was listed
    and applied. LOAD files (``LOAD…``) sort after every CDC name (a timestamp, digits first), so
    a watermark never covers one: they stay named. Its size is O(keys since the watermark)."""

    keys: frozenset[str] = frozenset()
    watermarks: Mapping[str, str] = field(default_factory=dict)  # folder -> the newest key covered
    exceptions: frozenset[str] = frozenset()  # keys at or below a watermark that are not applied
    count: int | None = None  # how many keys are applied in all (None: ``keys``, none covered)

    @classmethod
    def of(cls, keys: Iterable[str] | AppliedKeys) -> AppliedKeys:
        return keys if isinstance(keys, AppliedKeys) else cls(frozenset(keys))

    def __len__(self) -> int:
        return len(self.keys) if self.count is None else self.count

    def __eq__(self, other: object) -> bool:
        """Equal to another's keys, watermarks and exceptions; to a set when it names every key."""
        if isinstance(other, (set, frozenset)):
            return not self.watermarks and not self.exceptions and self.keys == other
        if isinstance(other, AppliedKeys):
            return (self.keys, dict(self.watermarks), self.exceptions, len(self)) == (
                other.keys, dict(other.watermarks), other.exceptions, len(other)
            )  # fmt: skip
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def watermark_of(self, key: str) -> str | None:
        """The watermark of ``key``'s folder (None: none)."""
        for folder, mark in self.watermarks.items():
            if key.startswith(folder + "/"):
                return mark
        return None

    def covered(self, key: str) -> bool:
        """Whether ``key`` is at or below its folder's watermark (applied unless an exception)."""
        mark = self.watermark_of(key)
        return mark is not None and key <= mark

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if key in self.keys:
            return True
        return key not in self.exceptions and self.covered(key)

    def __or__(self, keys: Iterable[str]) -> AppliedKeys:
        """These keys applied too: a covered one leaves the exceptions, another is named."""
        added = frozenset(keys)
        if not added:
            return self
        covered = frozenset(k for k in added if self.covered(k))
        count = len(self) + sum(1 for k in added if k not in self)
        return AppliedKeys(self.keys | (added - covered), self.watermarks, self.exceptions - covered, count)

    def __bool__(self) -> bool:
        return bool(self.keys or self.watermarks)

    @property
    def size(self) -> int:
        """What it holds: named keys, exceptions and watermarks (the state a driver keeps)."""
        return len(self.keys) + len(self.exceptions) + len(self.watermarks)


@dataclass(frozen=True)
class LedgerCheckpoint:
    """A table's ledger compacted, as stored in a CDC commit's summary (``CHECKPOINT_PROPERTY``):
    what the ledger said before that commit's own files."""

    applied: AppliedKeys
    full_load_done: bool
    cdc_applied: bool  # CDC files applied since the last full load
    loaded: Mapping[str, LoadedFile]  # the last full load's LOAD files (what tells a reload)

    def properties(self) -> dict[str, str]:
        """The summary property, or none when it would name more than ``CHECKPOINT_MAX_KEYS`` keys."""
        applied = self.applied
        if len(applied.keys) + len(applied.exceptions) + len(self.loaded) > CHECKPOINT_MAX_KEYS:
            return {}
        value = {
            "v": 1,
            "watermarks": dict(sorted(applied.watermarks.items())),
            "exceptions": sorted(applied.exceptions),
            "keys": sorted(applied.keys),
            "count": len(applied),
            "full_load_done": self.full_load_done,
            "cdc_applied": self.cdc_applied,
            "loaded": {k: [f.size, f.version] for k, f in sorted(self.loaded.items())},
        }
        return {CHECKPOINT_PROPERTY: _compact(value)}

    @classmethod
    def from_summary(cls, text: str | None) -> LedgerCheckpoint | None:
        if not text:
            return None
        value = json.loads(text)
        applied = AppliedKeys(
            frozenset(value["keys"]), dict(value["watermarks"]), frozenset(value["exceptions"]), int(value["count"])
        )
        loaded = {k: LoadedFile(k, size, version) for k, (size, version) in value["loaded"].items()}
        return cls(applied, bool(value["full_load_done"]), bool(value["cdc_applied"]), loaded)


@dataclass(frozen=True)
class LoadedFile:
    """One bronze file a full load recorded: a LOAD file with what tells its content from the same
    name written again, or a CDC file the load superseded (its key alone)."""

    key: str
    # the LOAD file's size (DMS writes a name again when a reload restarts the counter); None for
    # a CDC file, or a ledger from before sizes were kept
    size: int | None = None
    # the LOAD file's version (modification time or ETag: written again in place with the same
    # size); None for a CDC file, or where the store or the ledger had none
    version: str | None = None

    def holds(self, size: int, version: str | None) -> bool:
        """Whether a file of ``size`` and ``version`` under this key is the content recorded: what
        the ledger does not know (no size, no version) does not tell them apart."""
        return self.size in (None, size) and (self.version is None or version is None or self.version == version)


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


FULL_LOAD_KINDS = frozenset({KIND_FULL_LOAD, KIND_FULL_LOAD_STAGED})


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def newest_commit_ts(snapshots: Iterable[Snapshot]) -> str | None:
    """The newest source commit time the ledger recorded over ``snapshots`` (read with
    LATEST_COMMIT_TS_PROPERTY in their summaries); None: none recorded."""
    stamps = (s.summary.get(LATEST_COMMIT_TS_PROPERTY) for s in snapshots)
    return max((stamp for stamp in stamps if stamp is not None), default=None)


@dataclass(frozen=True)
class LedgerRecord:
    """One commit's ledger entry: what it applied, as the snapshot summary holds it.

    ``kind`` is a CDC batch or a full load (staged or done); ``files`` are the bronze files it
    applied, in order, each with the size and version a full load keeps of its LOAD files (a CDC
    file has neither); ``latest_commit_ts`` is the newest source commit time of a CDC batch.
    """

    kind: str
    files: tuple[LoadedFile, ...]
    latest_commit_ts: str | None = None

    @classmethod
    def batch(cls, files: Iterable[str], latest_commit_ts: str | None = None) -> LedgerRecord:
        """The record of a CDC batch of the bronze files ``files``."""
        return cls(KIND_CDC, tuple(LoadedFile(key) for key in files), latest_commit_ts)

    @property
    def keys(self) -> tuple[str, ...]:
        """The bronze keys applied, in order."""
        return tuple(f.key for f in self.files)

    def properties(self) -> dict[str, str]:
        """The snapshot-summary properties holding this record, as ledgers always have: a full load
        keeps its LOAD files' sizes (always) and versions (where known), a CDC batch neither."""
        properties = {KIND_PROPERTY: self.kind, FILES_PROPERTY: _compact(list(self.keys))}
        if self.latest_commit_ts:
            properties[LATEST_COMMIT_TS_PROPERTY] = self.latest_commit_ts
        if self.kind in FULL_LOAD_KINDS:
            properties[LOAD_SIZES_PROPERTY] = _compact({f.key: f.size for f in self.files if f.size is not None})
            if versions := {f.key: f.version for f in self.files if f.version is not None}:
                properties[LOAD_VERSIONS_PROPERTY] = _compact(versions)
        return properties

    @classmethod
    def from_summary(cls, summary: Mapping[str, str]) -> LedgerRecord | None:
        """The record a snapshot summary holds; None for a commit that recorded none (maintenance,
        a foreign writer). Other properties are ignored; what an older ledger did not keep (sizes,
        versions, the commit time) reads as unknown."""
        kind = summary.get(KIND_PROPERTY)
        if not kind:
            return None
        files = _loaded_files(summary.get(FILES_PROPERTY), summary.get(LOAD_SIZES_PROPERTY),
                              summary.get(LOAD_VERSIONS_PROPERTY))  # fmt: skip
        return cls(kind, tuple(files), summary.get(LATEST_COMMIT_TS_PROPERTY) or None)


def _loaded_files(files: str | None, sizes: str | None, versions: str | None) -> list[LoadedFile]:
    """The files a stored ledger entry records, each with its size and version where it has them:
    the one reader of the stored format."""
    size_of = json.loads(sizes) if sizes else {}
    version_of = json.loads(versions) if versions else {}
    return [LoadedFile(key, size_of.get(key), version_of.get(key)) for key in (json.loads(files) if files else [])]


_LINEAGE_KEYS = (
    KIND_PROPERTY, FILES_PROPERTY, LOAD_SIZES_PROPERTY, LOAD_VERSIONS_PROPERTY, "total-records", CHECKPOINT_PROPERTY
)  # fmt: skip


@dataclass(frozen=True)
class LineageEntry:
    """One snapshot of a table's current lineage, with the ledger record its commit carries."""

    snapshot: SnapshotRef
    committed_at: datetime  # UTC, naive
    record: LedgerRecord | None  # None: a commit that recorded none (maintenance, another writer)
    total_records: int  # the rows the table held at it
    checkpoint: str | None = None  # the compacted ledger before it (``CHECKPOINT_PROPERTY``)

    @property
    def kind(self) -> str | None:
        return None if self.record is None else self.record.kind

    @property
    def files(self) -> tuple[LoadedFile, ...]:
        """The files it records (a full load's LOAD files with their sizes and versions; a CDC
        batch's files with neither)."""
        return () if self.record is None else self.record.files


def _lineage(spark: SparkSession, table: SilverTable) -> Iterator[LineageEntry]:
    """Ancestors of the current snapshot, newest first, with their ledger records.

    Read through the Iceberg Java API (parent pointers from the current snapshot back to the
    first one maintenance has not expired): table metadata only, no Spark job. Lazily: a reader
    that stops early (at a full load, at the snapshot it looks for) walks no further.
    """
    return lineage_entries(IcebergTable.latest(spark, table.identifier).lineage(_LINEAGE_KEYS))


@dataclass(frozen=True)
class SnapshotRef:
    """One snapshot of a table: its id, and its sequence number (which grows with every commit
    in the table's lineage, so it orders snapshots even after some of them have expired)."""

    snapshot_id: int
    sequence_number: int


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


def lineage_entries(snapshots: Iterable[Snapshot]) -> Iterator[LineageEntry]:
    """A lineage's snapshots (newest first) with their ledger records, read from their summaries."""
    for snapshot in snapshots:
        yield LineageEntry(
            SnapshotRef(snapshot.snapshot_id, snapshot.sequence_number),
            snapshot.committed_at,
            LedgerRecord.from_summary(snapshot.summary),
            int(snapshot.summary.get("total-records") or 0),
            snapshot.summary.get(CHECKPOINT_PROPERTY),
        )


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

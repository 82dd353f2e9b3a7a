"""A typed handle over one Iceberg table: its snapshots, properties and commits.

Read and written through the Iceberg Java API (table metadata only: no Spark job). The py4j
objects stay inside ``lake/``: callers above it read typed values (``Snapshot``) and call named
operations; ``java`` is for the ``lake/`` modules that build Iceberg operations of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Snapshot:
    """One snapshot of a table, with the entries of its summary that were asked for (each entry
    is a call to the JVM: a reader asks for the ones it uses)."""

    snapshot_id: int
    sequence_number: int
    parent_id: int | None
    timestamp_millis: int
    summary: Mapping[str, str]

    @property
    def committed_at(self) -> datetime:
        """When it was committed, in UTC (naive, as Spark's timestamps are read)."""
        return datetime.fromtimestamp(self.timestamp_millis / 1000, UTC).replace(tzinfo=None)


def _snapshot(java: Any, keys: Iterable[str] | None) -> Snapshot:
    summary = java.summary()
    if keys is None:
        values = {str(k): str(v) for k, v in dict(summary).items()}
    else:
        values = {key: str(value) for key in keys if (value := summary.get(key)) is not None}
    parent = java.parentId()
    return Snapshot(
        snapshot_id=int(java.snapshotId()),
        sequence_number=int(java.sequenceNumber()),
        parent_id=None if parent is None else int(parent),
        timestamp_millis=int(java.timestampMillis()),
        summary=values,
    )


def _carries(snapshot: Snapshot, properties: Mapping[str, str]) -> bool:
    return all(snapshot.summary.get(name) == value for name, value in properties.items())


DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2  # Iceberg's FileContent ids


@dataclass(frozen=True)
class ContentFile:
    """A data or delete file, as a snapshot added or removed it. ``java`` is Iceberg's own entry,
    for the ``lake/`` modules that commit it again."""

    path: str
    content: int  # DATA, POSITION_DELETES or EQUALITY_DELETES
    records: int
    size: int
    # A deletion vector's place in its Puffin file (the DVs one task writes share one file).
    offset: int | None
    # The data file a position delete file points into, where it names one (a DV; a file-scoped
    # delete file, by its bounds); None for data files and partition-scoped deletes.
    referenced: str | None
    java: Any = field(compare=False, repr=False)

    @property
    def identity(self) -> tuple[str, int | None]:
        """What tells content files apart: the path, and a deletion vector's offset."""
        return self.path, self.offset


@dataclass(frozen=True)
class NetFiles:
    """The files some snapshots added and removed, netted: a file added and removed again within
    them is in neither list."""

    added_data: tuple[ContentFile, ...]
    removed_data: tuple[ContentFile, ...]
    added_deletes: tuple[ContentFile, ...]
    removed_deletes: tuple[ContentFile, ...]


@dataclass(frozen=True)
class ScanTask:
    """One data file of a snapshot as Iceberg plans its scan (its delete files attached)."""

    path: str
    size: int
    java: Any = field(compare=False, repr=False)


class IcebergTable:
    """The Iceberg table behind one identifier (the catalog's cached instance), as loaded or last
    refreshed. ``keys``: the summary entries each returned ``Snapshot`` holds (None: all)."""

    def __init__(self, java: Any, jvm: Any) -> None:
        self.java = java
        self.jvm = jvm

    @classmethod
    def load(cls, spark: SparkSession, identifier: str) -> IcebergTable:
        """The table as the catalog holds it (maybe cached: ``refresh`` for its latest metadata)."""
        jvm: Any = spark.sparkContext._jvm
        return cls(jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, identifier), jvm)

    @classmethod
    def latest(cls, spark: SparkSession, identifier: str) -> IcebergTable:
        """The table with its latest metadata."""
        return cls.load(spark, identifier).refresh()

    def refresh(self) -> IcebergTable:
        self.java.refresh()
        return self

    @property
    def location(self) -> str:
        return str(self.java.location())

    @property
    def metadata_location(self) -> str:
        """The metadata file the handle was loaded or last refreshed at."""
        return str(self.java.operations().current().metadataFileLocation())

    @property
    def first_column(self) -> str:
        """The name of the schema's first top-level column."""
        return str(self.java.schema().columns().get(0).name())

    @property
    def current_snapshot_id(self) -> int | None:
        current = self.java.currentSnapshot()
        return None if current is None else int(current.snapshotId())

    def current(self, keys: Iterable[str] | None = ()) -> Snapshot | None:
        current = self.java.currentSnapshot()
        return None if current is None else _snapshot(current, keys)

    def snapshot(self, snapshot_id: int, keys: Iterable[str] | None = ()) -> Snapshot | None:
        """Snapshot ``snapshot_id`` (None: not this table's, or expired)."""
        found = self.java.snapshot(int(snapshot_id))
        return None if found is None else _snapshot(found, keys)

    def lineage(self, keys: Iterable[str] | None = (), start: int | None = None) -> Iterator[Snapshot]:
        """The current snapshot (or ``start``) and its ancestors, newest first, back to the first one
        maintenance has not expired. Lazily: a reader that stops early walks no further."""
        wanted = None if keys is None else tuple(keys)
        found = self.java.currentSnapshot() if start is None else self.java.snapshot(int(start))
        while found is not None:
            snapshot = _snapshot(found, wanted)
            yield snapshot
            found = None if snapshot.parent_id is None else self.java.snapshot(snapshot.parent_id)

    def snapshots_after(self, older: int, newer: int) -> list[int] | None:
        """The snapshots from ``newer`` back to ``older`` (not included), newest first; None when
        ``older`` is not in ``newer``'s lineage (a rollback, a replace, or expired)."""
        between: list[int] = []
        for snapshot in self.lineage(start=newer):
            if snapshot.snapshot_id == older:
                return between
            between.append(snapshot.snapshot_id)
        return None

    def net_files(self, snapshot_ids: Sequence[int]) -> NetFiles:
        """The files the snapshots ``snapshot_ids`` (newest first, as ``snapshots_after`` lists
        them) added and removed, netted (their manifests: no Spark job)."""
        io = self.java.io()
        added_data: dict[tuple[str, int | None], ContentFile] = {}
        removed_data: dict[tuple[str, int | None], ContentFile] = {}
        added_deletes: dict[tuple[str, int | None], ContentFile] = {}
        removed_deletes: dict[tuple[str, int | None], ContentFile] = {}
        for snapshot_id in reversed(snapshot_ids):
            snapshot = self.java.snapshot(int(snapshot_id))
            for added, removed, add_files, remove_files in (
                (added_data, removed_data, snapshot.addedDataFiles(io), snapshot.removedDataFiles(io)),
                (added_deletes, removed_deletes, snapshot.addedDeleteFiles(io), snapshot.removedDeleteFiles(io)),
            ):
                for file in map(self._content_file, remove_files):
                    if added.pop(file.identity, None) is None:
                        removed[file.identity] = file
                for file in map(self._content_file, add_files):
                    added[file.identity] = file
        return NetFiles(
            *(tuple(files.values()) for files in (added_data, removed_data, added_deletes, removed_deletes))
        )

    def _content_file(self, java: Any) -> ContentFile:
        content = int(java.content().id())
        offset = java.contentOffset() if hasattr(java, "contentOffset") else None
        referenced = None
        if content == POSITION_DELETES:
            found = self.jvm.org.apache.iceberg.util.ContentFileUtil.referencedDataFileLocation(java)
            referenced = None if found is None else str(found)
        return ContentFile(
            path=str(java.location()),
            content=content,
            records=int(java.recordCount()),
            size=int(java.fileSizeInBytes()),
            offset=None if offset is None else int(offset),
            referenced=referenced,
            java=java,
        )

    def planned_files(self, snapshot_id: int) -> Iterator[ScanTask]:
        """Each data file of snapshot ``snapshot_id`` as Iceberg plans its scan, with the
        snapshot's delete files (its manifests: no Spark job)."""
        tasks = self.java.newScan().useSnapshot(int(snapshot_id)).planFiles()
        try:
            iterator = tasks.iterator()
            while iterator.hasNext():
                task = iterator.next()
                data_file = task.file()
                yield ScanTask(str(data_file.location()), int(data_file.fileSizeInBytes()), task)
        finally:
            tasks.close()

    def stage_scan(self, set_id: str, tasks: Sequence[ScanTask]) -> None:
        """Stage ``tasks`` as the scan task set ``set_id`` (Spark reads it with the
        ``scan-task-set-id`` option, as Iceberg's compaction does); ``unstage_scan`` drops it."""
        listed = self.jvm.java.util.ArrayList()
        for task in tasks:
            listed.add(task.java)
        self.jvm.org.apache.iceberg.spark.ScanTaskSetManager.get().stageTasks(self.java, set_id, listed)

    def unstage_scan(self, set_id: str) -> None:
        self.jvm.org.apache.iceberg.spark.ScanTaskSetManager.get().removeTasks(self.java, set_id)

    def commit_row_delta(
        self,
        base_snapshot_id: int,
        properties: Mapping[str, str],
        added_data: Sequence[Any] = (),
        added_deletes: Sequence[Any] = (),
        removed_data: Sequence[Any] = (),
        removed_deletes: Sequence[Any] = (),
        referenced: Iterable[str] = (),
    ) -> Snapshot:
        """Commit one RowDelta on ``main`` of Iceberg's content file entries (``ContentFile.java``,
        or those ``lake/`` builds) carrying ``properties``, validated against ``base_snapshot_id``:
        it fails (a commit conflict) if a data or delete file was added since, a file it removes is
        gone, or a data file in ``referenced`` (the paths its deletes point into) no longer exists.
        Returns the snapshot it made (``committed``)."""
        delta = self.java.newRowDelta()
        for file in added_data:
            delta = delta.addRows(file)
        for file in removed_data:
            delta = delta.removeRows(file)
        for file in added_deletes:
            delta = delta.addDeletes(file)
        for file in removed_deletes:
            delta = delta.removeDeletes(file)
        paths = self.jvm.java.util.ArrayList()
        for path in referenced:
            paths.add(path)
        delta = (
            delta.validateFromSnapshot(base_snapshot_id)
            .conflictDetectionFilter(self.jvm.org.apache.iceberg.expressions.Expressions.alwaysTrue())
            .validateNoConflictingDataFiles()
            .validateNoConflictingDeleteFiles()
            .validateDeletedFiles()
            .validateDataFilesExist(paths)
        )
        for name, value in properties.items():
            delta = delta.set(name, value)
        return self.committed(delta)

    def committed(self, update: Any) -> Snapshot:
        """Commit ``update`` (an Iceberg ``SnapshotUpdate`` of this table) and return the snapshot it
        made, whatever other writers commit around it: the update knows its own snapshot's id before
        it commits (kept through Iceberg's retries) and says it after (``updateEvent``, the event
        Iceberg tells its listeners); the snapshot is then read from the metadata the commit left."""
        update.commit()
        snapshot_id = int(update.updateEvent().snapshotId())
        found = self.java.snapshot(snapshot_id)
        if found is None:  # the commit's metadata not yet read back by this handle
            found = self.refresh().java.snapshot(snapshot_id)
        if found is None:
            raise LookupError(f"{self.java.name()}: the snapshot {snapshot_id} just committed is not in its metadata")
        return _snapshot(found, None)

    @property
    def last_sequence_number(self) -> int:
        """The sequence number of the newest snapshot committed to the table, on any branch (0: none)."""
        return int(self.java.operations().current().lastSequenceNumber())

    def made_since(self, last_sequence_number: int, properties: Mapping[str, str]) -> Snapshot:
        """The snapshot carrying ``properties`` in its summary committed after ``last_sequence_number``
        (``last_sequence_number`` read just before a commit of ours that Spark made: Spark hands no
        snapshot back). The current snapshot when it is the one commit since (the common case: one
        look); else, another writer having committed around ours, the newest such snapshot among the
        table's snapshots since (never one made before ours started)."""
        current = self.current(None)
        if (
            current is not None
            and current.sequence_number == last_sequence_number + 1
            and _carries(current, properties)
        ):
            return current
        since = [s for s in self.snapshots(properties) if s.sequence_number > last_sequence_number]
        ours = [s for s in since if _carries(s, properties)]
        if not ours:
            raise LookupError(f"{self.java.name()}: no snapshot since sequence number {last_sequence_number} "
                              f"carries {sorted(properties)}")  # fmt: skip
        newest = max(ours, key=lambda s: s.sequence_number)
        return self.snapshot(newest.snapshot_id, None) or newest

    def snapshots(self, keys: Iterable[str] | None = ()) -> Iterator[Snapshot]:
        """Every snapshot the metadata holds (its lineage and any other), oldest first."""
        wanted = None if keys is None else tuple(keys)
        for found in self.java.snapshots():
            yield _snapshot(found, wanted)

    def snapshot_count(self) -> int:
        count = 0
        snapshots = self.java.snapshots().iterator()
        while snapshots.hasNext():
            snapshots.next()
            count += 1
        return count

    def property(self, name: str) -> str | None:
        value = self.java.properties().get(name)
        return None if value is None else str(value)

    def set_property(self, name: str, value: str) -> None:
        """Set a table property: a metadata commit, no snapshot."""
        self.java.updateProperties().set(name, value).commit()

    def tag(self, name: str) -> int | None:
        """The snapshot the tag ``name`` points at (None: no such tag)."""
        ref = self.java.refs().get(name)
        return None if ref is None else int(ref.snapshotId())

    def ref_names(self) -> list[str]:
        """The names of the table's branches and tags."""
        return [str(name) for name in self.java.refs().keySet()]

    def move_tags(self, names: Sequence[str], snapshot_id: int, removed: Sequence[str] = ()) -> None:
        """Point the tags ``names`` at ``snapshot_id`` (created or moved) and remove the tags
        ``removed``: one metadata commit, no data moves."""
        refs, manage = self.java.refs(), self.java.manageSnapshots()
        for name in names:
            move = manage.replaceTag if refs.containsKey(name) else manage.createTag
            manage = move(name, snapshot_id)
        for name in removed:
            manage = manage.removeTag(name)
        manage.commit()

    def append_nothing(self, summary: Mapping[str, str]) -> Snapshot:
        """Commit a snapshot that adds no data, only ``summary`` (what an empty Spark append commits,
        without its Spark job); return it."""
        append = self.java.newAppend()
        for name, value in summary.items():
            append = append.set(name, value)
        return self.committed(append)

    def expire_snapshots(self, older_than: datetime, retain_last: int) -> None:
        """Expire the snapshots committed before ``older_than`` but the last ``retain_last`` (on the
        driver: reads the expired snapshots' manifests, no Spark job)."""
        millis = int(older_than.timestamp() * 1000)
        self.java.expireSnapshots().expireOlderThan(millis).retainLast(retain_last).commit()

    def holds_file_created_before(self, spark: SparkSession, cutoff: datetime) -> bool:
        """Whether a file under the table's location was created before ``cutoff``: one listing
        through the table's FileIO, stopped at the first such file; True when it cannot list."""
        io = self.java.io()
        jvm: Any = spark.sparkContext._jvm
        listing = jvm.java.lang.Class.forName(
            "org.apache.iceberg.io.SupportsPrefixOperations", True, io.getClass().getClassLoader()
        )
        if not listing.isInstance(io):
            return True
        limit = int(cutoff.timestamp() * 1000)
        files = io.listPrefix(self.location.rstrip("/") + "/").iterator()  # not the table beside it
        while files.hasNext():
            if int(files.next().createdAtMillis()) < limit:
                return True
        return False

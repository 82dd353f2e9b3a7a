"""The published cuts: the ``cdclake_cuts`` record and each table's ``cdclake_cut`` tag.

A cut (``engine.cut``) is published after the round's table commits, in this order:

1. **The record**: one append to ``<silver database>.cdclake_cuts``, one row per table (the cut's
   source commit time T, its source position, the table and the snapshot id that holds exactly T),
   in one Iceberg commit whose snapshot summary also carries the whole cut (``CUT_PROPERTY``). A
   reader at any snapshot of ``cdclake_cuts`` sees a cut whole or not at all: every table at T or,
   before the commit, every table at the previous cut — never a mix.
2. **The tags**: on each table ``cdclake_cut`` at the cut's snapshot, and a dated
   ``cdclake_cut_<T>`` for the first cut of each hour, kept ``silver.cut_tag_days`` days (``CutTags``),
   in one metadata commit per table, several tables at once. Tags are moved table by table, so a
   reader of several tags during those moments (or after a crash among them) can see two cuts; the
   record is the atomic one. Every publication first moves the tags still at an older cut than the
   record's (``CutPublisher.repair``), so a crash among them is mended by the next round, cut or no cut.

A crash before the record leaves the previous cut the latest, and its snapshots are kept: each is
the target of a tag until the tags move, and a tagged snapshot is never expired. Older cuts stay in
the record; their snapshots are read for as long as maintenance keeps them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from cdclake.identifiers import sql_string
from cdclake.lake.driver_write import append_collected
from cdclake.lake.iceberg import IcebergTable
from cdclake.lake.ledger_record import LATEST_COMMIT_TS_PROPERTY
from cdclake.lake.tables import SilverTable, ensure_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdclake.lake.committer import IcebergCommitter
    from cdclake.lake.local_tables import LocalTable

CUTS_TABLE = "cdclake_cuts"
CUT_TAG = "cdclake_cut"
DATED_TAG = "cdclake_cut_"  # + T: the tag of one cut an hour (``CutTags``)
CUT_PROPERTY = "cdclake.cut"  # on each cdclake_cuts commit: the cut it records, as JSON
CUT_COLUMNS = (
    ("cut_ts", "string"),  # T: the source commit time, UTC, yyyy-MM-dd HH:mm:ss.ffffff (NULL: none seen yet)
    ("cut_position", "string"),  # the source position, fixed width: text order is source order
    ("position_text", "string"),  # the position as people read it (an LSN, a transaction file)
    ("cut_kind", "string"),  # what proves it: capture (a progress record) or transactions
    ("table_name", "string"),  # the silver table, in the same database
    ("snapshot_id", "bigint"),  # the table's snapshot that holds exactly the changes up to T
    ("published_at", "timestamp"),
)


@dataclass(frozen=True)
class Cut:
    """Every configured table at one source position: P, T and each silver table's snapshot."""

    kind: str
    position: str
    position_text: str
    commit_ts: str | None
    snapshots: Mapping[str, int] = field(default_factory=dict)  # silver table name -> snapshot id


@dataclass(frozen=True)
class PublishedCut:
    """A cut as the record holds it."""

    kind: str
    position: str
    position_text: str
    commit_ts: str | None
    snapshots: Mapping[str, int] = field(default_factory=dict)  # silver table name -> snapshot id

    def to_json(self) -> str:
        return json.dumps(
            {"kind": self.kind, "position": self.position, "position_text": self.position_text,
             "commit_ts": self.commit_ts, "snapshots": dict(sorted(self.snapshots.items()))},
            separators=(",", ":"),
        )  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> PublishedCut:
        data = json.loads(text)
        snapshots = {str(k): int(v) for k, v in data["snapshots"].items()}
        return cls(data["kind"], data["position"], data["position_text"], data.get("commit_ts"), snapshots)

    @classmethod
    def of(cls, cut: Cut) -> PublishedCut:
        return cls(cut.kind, cut.position, cut.position_text, cut.commit_ts, dict(cut.snapshots))


def cuts_table(catalog: str, database: str) -> SilverTable:
    return SilverTable(catalog, database, CUTS_TABLE)


def latest_cut(spark: SparkSession, catalog: str, database: str) -> PublishedCut | None:
    """The newest cut recorded (table metadata: the newest ``cdclake_cuts`` commit that carries one)."""
    table = cuts_table(catalog, database)
    if not table_exists(spark, table):
        return None
    for snapshot in IcebergTable.latest(spark, table.identifier).lineage(keys=[CUT_PROPERTY]):
        if CUT_PROPERTY in snapshot.summary:
            return PublishedCut.from_json(snapshot.summary[CUT_PROPERTY])
    return _cut_rows(spark, table, None)


def latest_local_cut(table: LocalTable | None) -> PublishedCut | None:
    """``latest_cut`` of a local warehouse's ``cdclake_cuts`` (``table``; None: there is none), with no
    JVM: its metadata file's lineage, else its rows read by pyiceberg."""
    if table is None:
        return None
    for snapshot in table.lineage():
        if CUT_PROPERTY in snapshot.summary:
            return PublishedCut.from_json(snapshot.summary[CUT_PROPERTY])
    rows = table.rows([name for name, _ in CUT_COLUMNS])
    newest = max((r["cut_position"] for r in rows if r["cut_position"] is not None), default=None)
    rows = [r for r in rows if newest is not None and r["cut_position"] == newest]
    if not rows:
        return None
    first = rows[0]
    snapshots = {str(r["table_name"]): int(r["snapshot_id"]) for r in rows}
    return PublishedCut(first["cut_kind"], first["cut_position"], first["position_text"], first["cut_ts"], snapshots)


def cut_at_or_before(spark: SparkSession, catalog: str, database: str, commit_ts: str) -> PublishedCut | None:
    """The newest recorded cut whose T is at or before ``commit_ts`` (text of the same form)."""
    table = cuts_table(catalog, database)
    return _cut_rows(spark, table, commit_ts) if table_exists(spark, table) else None


def _cut_rows(spark: SparkSession, table: SilverTable, at_or_before: str | None) -> PublishedCut | None:
    where = "" if at_or_before is None else f"WHERE cut_ts <= {sql_string(at_or_before)}"
    rows = spark.sql(
        f"""
        SELECT * FROM {table.identifier}
        WHERE cut_position = (SELECT max(cut_position) FROM {table.identifier} {where})
        """
    ).collect()
    if not rows:
        return None
    first = rows[0]
    snapshots = {str(r["table_name"]): int(r["snapshot_id"]) for r in rows}
    return PublishedCut(first["cut_kind"], first["cut_position"], first["position_text"], first["cut_ts"], snapshots)


def record_cut(spark: SparkSession, catalog: str, database: str, cut: PublishedCut) -> None:
    """Append ``cut`` to ``cdclake_cuts``: one row per table, one commit carrying the whole cut."""
    import pyarrow as pa

    table = cuts_table(catalog, database)
    empty = spark.sql(
        "SELECT " + ", ".join(f"CAST(NULL AS {kind}) AS {name}" for name, kind in CUT_COLUMNS) + " WHERE false"
    )
    ensure_table(spark, table, empty)
    tables = sorted(cut.snapshots.items())
    fixed = {"cut_ts": cut.commit_ts, "cut_position": cut.position, "position_text": cut.position_text}
    rows = pa.table(
        {
            **{name: pa.array([value] * len(tables), pa.string()) for name, value in fixed.items()},
            "cut_kind": pa.array([cut.kind] * len(tables), pa.string()),
            "table_name": pa.array([name for name, _ in tables], pa.string()),
            "snapshot_id": pa.array([int(sid) for _, sid in tables], pa.int64()),
            "published_at": pa.array([datetime.now(UTC)] * len(tables), pa.timestamp("us", tz="UTC")),
        }
    )
    # written by the driver (``lake.driver_write``): no Spark job for a few rows; a cut of no table
    # yet is a commit all the same (the record is its summary)
    if tables:
        append_collected(spark, table.identifier, rows, {CUT_PROPERTY: cut.to_json()})
    else:
        IcebergTable.latest(spark, table.identifier).append_nothing({CUT_PROPERTY: cut.to_json()})


def tagged_snapshot(spark: SparkSession, table: SilverTable) -> int | None:
    """The snapshot ``table``'s ``cdclake_cut`` tag points at (None: no tag)."""
    return IcebergTable.latest(spark, table.identifier).tag(CUT_TAG)


def dated_tag(commit_ts: str | None) -> str | None:
    """The name of the tag that keeps a cut by its T (``cdclake_cut_20240102_000002_000000`` for
    ``2024-01-02 00:00:02.000000``: text order is time order); None for a cut with no T yet."""
    if commit_ts is None:
        return None
    return DATED_TAG + re.sub(r"[^0-9]+", "_", re.sub(r"[-:]", "", commit_ts)).strip("_")


# A dated tag's name up to its hour (``cdclake_cut_20240102_00``): one dated tag an hour.
_HOUR = len(DATED_TAG) + len("20240102_00")


@dataclass(frozen=True)
class TagMoves:
    """What one table's tags do for a cut, in one metadata commit: tags set to the cut's snapshot, and
    dated tags removed."""

    set: tuple[str, ...]
    removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class CutTags:
    """How a publication tags each table: ``cdclake_cut`` at the latest cut, and a dated tag for the
    first cut of each hour, kept ``keep_days`` days of source time (0: none); moved ``workers``
    tables at a time, each table's in one metadata commit.

    The dated tags are dropped here, by T, not by Iceberg's ``max-ref-age-ms``: that counts a tag's
    age from its snapshot's commit, so a quiet table's tag would go at once and a cut would be
    readable by its name on some tables only."""

    keep_days: int = 7
    workers: int = 8

    def moves(self, cut: PublishedCut, existing: Collection[str]) -> TagMoves:
        """The tag moves of a table whose tags are ``existing`` (every ref's name)."""
        dated = [name for name in existing if name.startswith(DATED_TAG)]
        new = dated_tag(cut.commit_ts) if self.keep_days > 0 else None
        if new is not None and any(name[:_HOUR] == new[:_HOUR] for name in dated):
            new = None  # this hour has its dated tag
        removed: tuple[str, ...] = ()
        if cut.commit_ts is not None:
            t = datetime.strptime(cut.commit_ts, "%Y-%m-%d %H:%M:%S.%f")
            oldest = dated_tag(f"{t - timedelta(days=self.keep_days):%Y-%m-%d %H:%M:%S.%f}")
            removed = tuple(sorted(name for name in dated if oldest is not None and name < oldest and name != new))
        return TagMoves((CUT_TAG,) if new is None else (CUT_TAG, new), removed)

    def same_hour(self, earlier: PublishedCut, later: PublishedCut) -> bool:
        """Whether ``later`` asks no dated tag ``earlier``'s did not: both in one hour, or none at all."""
        first, second = dated_tag(earlier.commit_ts), dated_tag(later.commit_ts)
        if self.keep_days <= 0 or second is None:
            return True
        return first is not None and first[:_HOUR] == second[:_HOUR]


@dataclass(frozen=True)
class CutPublisher:
    """Publishes the cuts of one silver database (``catalog``.``database``): the record, then the
    tags, each step through ``committer.cut_step`` (the fault tests' seam)."""

    spark: SparkSession
    catalog: str
    database: str
    committer: IcebergCommitter
    tags: CutTags = CutTags()

    def publish(self, cut: PublishedCut, tagged: PublishedCut | None = None) -> list[str]:
        """Record ``cut``, then move the tags to it (the order the module docstring proves); the
        tables whose tags moved. ``tagged``: the previous cut, when its tags are known to be in place
        (only the tables whose snapshot moved since are looked at, as ``repair`` says)."""
        self.record(cut)
        return self.repair(cut, tagged)

    def record(self, cut: PublishedCut) -> None:
        """Record ``cut`` (the ``record`` step): from here on it is the latest cut; its tags follow."""
        self.committer.cut_step("record", lambda: record_cut(self.spark, self.catalog, self.database, cut))

    def repair(self, cut: PublishedCut, tagged: PublishedCut | None = None) -> list[str]:
        """Move every tag that is not at ``cut`` (the latest record) to it, ``tags.workers`` tables at
        a time (a table's tags in one metadata commit); the tables moved. Every table is tried; the
        first failure is raised after the others are done. ``tagged``: a cut whose tags are known to
        be in place; a table at the same snapshot in both is left alone, unless ``cut`` is the first
        of an hour (a dated tag for every table)."""
        items = sorted(cut.snapshots.items())
        if tagged is not None and self.tags.same_hour(tagged, cut):
            items = [(name, sid) for name, sid in items if tagged.snapshots.get(name) != sid]
        workers = max(1, min(self.tags.workers, len(items)))
        with ThreadPoolExecutor(workers, thread_name_prefix="cdclake-tag") as pool:
            futures = [(name, pool.submit(self._move, cut, name, snapshot_id)) for name, snapshot_id in items]
            wait([f for _, f in futures])
        failed = next((f.exception() for _, f in futures if f.exception() is not None), None)
        if failed is not None:
            raise failed
        return [name for name, f in futures if f.result()]

    def _move(self, cut: PublishedCut, name: str, snapshot_id: int) -> bool:
        """Move one table's tags to ``snapshot_id`` if they are not there; whether they moved."""
        table = SilverTable(self.catalog, self.database, name)
        if not table_exists(self.spark, table):
            return False
        iceberg = IcebergTable.latest(self.spark, table.identifier)
        moves = self.tags.moves(cut, iceberg.ref_names())
        if iceberg.tag(CUT_TAG) == snapshot_id and moves.set == (CUT_TAG,) and not moves.removed:
            return False
        self.committer.cut_step(f"tag {name}", partial(iceberg.move_tags, moves.set, snapshot_id, moves.removed))
        return True


def newest_commit_ts(spark: SparkSession, table: SilverTable, snapshot_id: int) -> str | None:
    """The newest source commit time ``table``'s lineage records up to ``snapshot_id`` (its
    newest CDC commit's ``cdclake.latest-commit-ts``); None: none recorded."""
    lineage = IcebergTable.latest(spark, table.identifier).lineage(keys=[LATEST_COMMIT_TS_PROPERTY], start=snapshot_id)
    return next((s.summary[LATEST_COMMIT_TS_PROPERTY] for s in lineage if LATEST_COMMIT_TS_PROPERTY in s.summary), None)

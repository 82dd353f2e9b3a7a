"""The published cuts: the ``cdclake_cuts`` record and each table's ``cdclake_cut`` tag.

A cut (``engine.cut``) is published after the round's table commits, in this order:

1. **The record**: one append to ``<silver database>.cdclake_cuts``, one row per table (the cut's
   source commit time T, its source position, the table and the snapshot id that holds exactly T),
   in one Iceberg commit whose snapshot summary also carries the whole cut (``CUT_PROPERTY``). A
   reader at any snapshot of ``cdclake_cuts`` sees a cut whole or not at all: every table at T or,
   before the commit, every table at the previous cut — never a mix.
2. **The tags**: ``ALTER TABLE ... CREATE OR REPLACE TAG cdclake_cut AS OF VERSION <id>`` on each table,
   for engines that read tags. Tags are moved one table at a time, so a reader of several tags
   during those moments (or after a crash among them) can see two cuts; the record is the atomic
   one. Every publication first moves the tags still at an older cut than the record's
   (``repair_tags``), so a crash among them is mended by the next round, cut or no cut.

A crash before the record leaves the previous cut the latest, and its snapshots are kept: each is
the target of a tag until the tags move, and a tagged snapshot is never expired. Older cuts stay in
the record; their snapshots are read for as long as maintenance keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from cdclake.identifiers import quote, sql_string
from cdclake.lake.iceberg import IcebergTable
from cdclake.lake.ledger_record import LATEST_COMMIT_TS_PROPERTY
from cdclake.lake.tables import SilverTable, commit_with_properties, ensure_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdclake.lake.committer import IcebergCommitter
    from cdclake.lake.local_tables import LocalTable

CUTS_TABLE = "cdclake_cuts"
CUT_TAG = "cdclake_cut"
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
    table = cuts_table(catalog, database)
    names = ", ".join(name for name, _ in CUT_COLUMNS)
    empty = spark.sql(
        "SELECT " + ", ".join(f"CAST(NULL AS {kind}) AS {name}" for name, kind in CUT_COLUMNS) + " WHERE false"
    )
    ensure_table(spark, table, empty)

    def text(value: str | None) -> str:
        return "CAST(NULL AS STRING)" if value is None else sql_string(value)

    values = ", ".join(
        f"({text(cut.commit_ts)}, {text(cut.position)}, {text(cut.position_text)}, {text(cut.kind)}, "
        f"{text(name)}, CAST({int(snapshot_id)} AS BIGINT), current_timestamp())"
        for name, snapshot_id in sorted(cut.snapshots.items())
    )
    rows = spark.sql(f"SELECT * FROM VALUES {values} AS v({names})")
    commit_with_properties(spark, {CUT_PROPERTY: cut.to_json()}, rows.writeTo(table.identifier).append)


def tagged_snapshot(spark: SparkSession, table: SilverTable) -> int | None:
    """The snapshot ``table``'s ``cdclake_cut`` tag points at (None: no tag)."""
    refs = IcebergTable.latest(spark, table.identifier).java.refs()
    ref = refs.get(CUT_TAG)
    return None if ref is None else int(ref.snapshotId())


def tag_cut(spark: SparkSession, table: SilverTable, snapshot_id: int) -> None:
    """Point ``table``'s ``cdclake_cut`` tag at ``snapshot_id`` (a metadata commit; no data moves)."""
    spark.sql(f"ALTER TABLE {table.identifier} CREATE OR REPLACE TAG {quote(CUT_TAG)} AS OF VERSION {int(snapshot_id)}")


def repair_tags(
    spark: SparkSession, catalog: str, database: str, cut: PublishedCut, committer: IcebergCommitter
) -> list[str]:
    """Move every tag that is not at ``cut`` (the latest record) to it; the tables moved."""
    moved = []
    for name, snapshot_id in sorted(cut.snapshots.items()):
        table = SilverTable(catalog, database, name)
        if not table_exists(spark, table) or tagged_snapshot(spark, table) == snapshot_id:
            continue
        committer.cut_step(f"tag {name}", partial(tag_cut, spark, table, snapshot_id))
        moved.append(name)
    return moved


def publish_cut(
    spark: SparkSession, catalog: str, database: str, cut: PublishedCut, committer: IcebergCommitter
) -> list[str]:
    """Record ``cut``, then move the tags to it (the order the module docstring proves); the tables
    whose tag moved."""
    committer.cut_step("record", lambda: record_cut(spark, catalog, database, cut))
    return repair_tags(spark, catalog, database, cut, committer)


def newest_commit_ts(spark: SparkSession, table: SilverTable, snapshot_id: int) -> str | None:
    """The newest source commit time ``table``'s lineage records up to ``snapshot_id`` (its
    newest CDC commit's ``cdclake.latest-commit-ts``); None: none recorded."""
    lineage = IcebergTable.latest(spark, table.identifier).lineage(keys=[LATEST_COMMIT_TS_PROPERTY], start=snapshot_id)
    return next((s.summary[LATEST_COMMIT_TS_PROPERTY] for s in lineage if LATEST_COMMIT_TS_PROPERTY in s.summary), None)

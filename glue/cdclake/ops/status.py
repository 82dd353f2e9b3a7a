"""Per-table status and ad-hoc queries on the silver catalog (read-only): what Spark reads of each
table and of the database, made into statuses by ``ops.table_status``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.config import TableConfig
from cdclake.dms.files import BronzeFile, BronzeListing
from cdclake.dms.store import list_bronze
from cdclake.engine.history_sync import history_lag
from cdclake.identifiers import quote, sql_string
from cdclake.lake.counts import TableFiles, distinct_keys, live_rows, table_files
from cdclake.lake.history import HISTORY_SINCE_PROPERTY, history_of, history_started
from cdclake.lake.iceberg import IcebergTable
from cdclake.lake.journals import (
    QUARANTINE_ROWS_TABLE,
    QUARANTINE_TABLE,
    SCHEMA_CHANGES_TABLE,
    quarantined_files_by_table,
    tombstones_of,
)
from cdclake.lake.ledger import LEDGER_ARCHIVE_TABLE, read_ledger, read_ledger_archive
from cdclake.lake.ledger_record import LATEST_COMMIT_TS_PROPERTY, newest_commit_ts
from cdclake.lake.tables import SilverTable, current_snapshot_id, table_names
from cdclake.ops.table_status import (
    Journals,
    SilverReading,
    TableStatus,
    absent_status,
    existing_status,
    held_by_capture,
    held_files,
    stray_status,
    stray_tables,
    undeclared_columns,
)

if TYPE_CHECKING:
    from cdclake.context import Engine


def _holds_rows(engine: Engine, name: str, existing: frozenset[str]) -> bool:
    """Whether the shared table ``name`` (a journal, the ledger archive) exists and may hold rows:
    an empty one (told by its metadata) is not read, so a healthy pipeline's status runs no Spark job for them."""
    return name in existing and _exact_rows(_refreshed(engine, _shared(engine, name))) != 0


def _shared(engine: Engine, name: str) -> SilverTable:
    return SilverTable(engine.catalog, engine.config.database, name)


def _journal_counts(engine: Engine, journal: str, time_column: str, detail: str) -> dict[str, tuple[int, Any]]:
    """Per silver table: how many journal entries, and the newest one's ``detail``."""
    table = _shared(engine, journal)
    rows = engine.spark.sql(
        f"SELECT silver_table, count(*) AS n, max_by({detail}, {time_column}) AS last "
        f"FROM {table.identifier} GROUP BY silver_table"
    ).collect()
    return {r["silver_table"]: (r["n"], r["last"]) for r in rows}


@dataclass(frozen=True)
class _Metadata:
    """What one silver table's metadata says, read through the Iceberg Java API (no Spark job)."""

    snapshots: int
    latest_change: str | None  # the newest LATEST_COMMIT_TS_PROPERTY over all snapshots
    # the current snapshot's total-records when it is exact (no delete files), else None
    exact_rows: int | None
    files: TableFiles | None  # where its rows are counted when ``exact_rows`` is None


def _metadata(engine: Engine, silver: SilverTable) -> _Metadata:
    """Snapshot count, newest source commit time and (when exact) the row count of ``silver``.

    The same snapshots as its ``snapshots`` metadata table. ``total-records`` counts the rows of
    the data files: it is the row count only when no delete file applies (``total-delete-files``
    is 0); otherwise, or when the summary lacks the totals, the rows are counted by a scan.
    """
    iceberg = _refreshed(engine, silver)
    snapshots = list(iceberg.snapshots((LATEST_COMMIT_TS_PROPERTY,)))
    exact = _exact_rows(iceberg)
    files = None if exact is not None else table_files(iceberg)
    return _Metadata(len(snapshots), newest_commit_ts(snapshots), exact, files)


def _refreshed(engine: Engine, table: SilverTable) -> IcebergTable:
    """The Iceberg table of ``table``, with its latest metadata."""
    return IcebergTable.latest(engine.spark, table.identifier)


def _exact_rows(iceberg: IcebergTable) -> int | None:
    """The rows of a table when its current snapshot's summary says them exactly:
    ``total-records`` with no delete file (``total-delete-files`` 0); 0 without a snapshot; else None."""
    current = iceberg.current(("total-records", "total-delete-files"))
    if current is None:
        return 0
    summary = current.summary
    records, deletes = summary.get("total-records"), summary.get("total-delete-files")
    return int(records) if records is not None and deletes is not None and int(deletes) == 0 else None


@dataclass(frozen=True)
class TableToCount:
    """A table whose rows (or distinct keys, with ``key``) the metadata does not say exactly, and
    where they are counted: in this process by pyiceberg when ``files.counted_here``, else by Spark."""

    table: SilverTable
    files: TableFiles
    key: Sequence[str] = ()


def count_rows_and_tombstones(
    engine: Engine, rows: Mapping[str, TableToCount], tombstones: Mapping[str, TableToCount]
) -> dict[tuple[str, str], int]:
    """The rows of each table of ``rows`` and the distinct keys of each tombstone table of
    ``tombstones`` (by target name): ``("rows" | "tombstones", target) -> count``. A table whose
    ``files.counted_here`` (on the local file system) is read here (``lake.counts``: no Spark job,
    which a cold command pays seconds for); the others in one Spark query for all of them
    (``_spark_counts``: tables on S3)."""
    counts = {("rows", name): live_rows(t.files) for name, t in rows.items() if t.files.counted_here}
    counts |= {
        ("tombstones", name): distinct_keys(t.files, t.key) for name, t in tombstones.items() if t.files.counted_here
    }
    return counts | _spark_counts(
        engine,
        {name: t.table for name, t in rows.items() if not t.files.counted_here},
        {name: (t.table, t.key) for name, t in tombstones.items() if not t.files.counted_here},
    )


def _spark_counts(
    engine: Engine, rows: Mapping[str, SilverTable], tombstones: Mapping[str, tuple[SilverTable, Sequence[str]]]
) -> dict[tuple[str, str], int]:
    """The rows of each table of ``rows`` and the distinct keys of each tombstone table of
    ``tombstones`` (by target name, with its key columns), in one query: ``("rows" | "tombstones",
    target) -> count``. A table that holds nothing is absent (its count is 0).

    Per-table aggregates in a UNION ALL would cost a Spark job each (adaptive execution runs every
    aggregate's shuffle on its own); instead the tables are unioned first and aggregated once: the
    rows, and the tombstone keys of each key type (keys as a positional struct, so tables whose keys
    have the same types share one DISTINCT, with Spark's own equality of values).
    """
    # The scans read in as many tasks as there are cores, not one (or more) per table and file:
    # on 2 cores, 40 tables took 200 tasks, whose scheduling cost more than the reading.
    tasks = engine.spark.sparkContext.defaultParallelism

    def scanned(scans: Sequence[str]) -> str:
        return f"(SELECT /*+ COALESCE({tasks}) */ * FROM ({' UNION ALL '.join(scans)}))"

    branches = []
    if rows:
        scans = [f"SELECT {sql_string(name)} AS name FROM {t.identifier}" for name, t in rows.items()]
        branches.append(f"SELECT 'rows' AS kind, name, count(*) AS n FROM {scanned(scans)} GROUP BY name")
    by_type: dict[tuple[str, ...], list[str]] = {}
    for name, (table, key) in tombstones.items():
        fields = engine.spark.table(table.identifier).select(*key).schema.fields
        struct = ", ".join(f"'k{i}', {quote(f.name)}" for i, f in enumerate(fields))
        scan = f"SELECT {sql_string(name)} AS name, named_struct({struct}) AS k FROM {table.identifier}"
        by_type.setdefault(tuple(f.dataType.simpleString() for f in fields), []).append(scan)
    branches += [
        f"SELECT 'tombstones' AS kind, name, count(*) AS n FROM (SELECT DISTINCT name, k FROM {scanned(scans)}) "
        "GROUP BY name"
        for scans in by_type.values()
    ]
    if not branches:
        return {}
    return {(r["kind"], r["name"]): int(r["n"]) for r in engine.spark.sql(" UNION ALL ".join(branches)).collect()}


def table_statuses(
    engine: Engine, now: datetime | None = None, capture_holds: Mapping[str, str] | None = None
) -> list[TableStatus]:
    """One status per configured table, read from the Iceberg metadata and the journals.

    ``capture_holds``: the tables `cdclake capture` holds (source name -> its reason), from its
    state next to the configuration: such a table is behind whatever silver says, never "up to date".

    At database size: each table's ledger, snapshots and (where exact) row count come from table
    metadata without a Spark job; the rest of the row counts and every tombstone count are one
    job together, and each journal and the ledger archive are read once for all tables.
    """
    now = now or datetime.now(UTC)
    facts = _read_database(engine)
    statuses = [_status_of(engine, table, facts, now) for table in engine.config.tables]
    holds = capture_holds or {}
    strays = [_stray(engine, name) for name in stray_tables(engine.config, facts.existing)]
    return [held_by_capture(s, holds[s.source]) if s.source in holds else s for s in statuses] + strays


def _stray(engine: Engine, name: str) -> TableStatus:
    """The status of a silver table no configured table writes: its rows (as its metadata says them)."""
    table = _shared(engine, name)
    try:
        rows = _exact_rows(_refreshed(engine, table))
    except Exception:  # not a table cdclake can read (a view, another format): listed all the same
        rows = None
    return stray_status(table, rows)


@dataclass(frozen=True)
class _DatabaseFacts:
    """What every table's status reads, read once for the database."""

    existing: frozenset[str]  # the database's table names
    journals: Journals
    listing: BronzeListing
    archive: Any  # the ledger archive, for read_ledger
    metadata: dict[str, _Metadata]  # by silver table, for the tables that exist
    counts: dict[tuple[str, str], int]  # ("rows" | "tombstones", table) -> count


def _read_database(engine: Engine) -> _DatabaseFacts:
    existing = table_names(engine.spark, engine.catalog, engine.config.database)
    filled = {
        name
        for name in (SCHEMA_CHANGES_TABLE, QUARANTINE_TABLE, QUARANTINE_ROWS_TABLE, LEDGER_ARCHIVE_TABLE)
        if _holds_rows(engine, name, existing)
    }
    schema_changes, quarantined, bad_rows = (
        _journal_counts(engine, name, time_column, detail) if name in filled else {}
        for name, time_column, detail in (
            (SCHEMA_CHANGES_TABLE, "changed_at", "change"),
            (QUARANTINE_TABLE, "quarantined_at", "reason"),
            (QUARANTINE_ROWS_TABLE, "quarantined_at", "reason"),
        )
    )
    listing = list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path)
    held_keys = (
        quarantined_files_by_table(engine.spark, engine.catalog, engine.config.database)
        if QUARANTINE_TABLE in filled
        else {}
    )
    archive = (
        read_ledger_archive(engine.spark, engine.catalog, engine.config.database)
        if LEDGER_ARCHIVE_TABLE in filled
        else {}
    )
    metadata: dict[str, _Metadata] = {}
    to_count: dict[str, TableToCount] = {}
    keys_of: dict[str, TableToCount] = {}
    for table in engine.config.tables:
        silver = engine.silver_table(table)
        if silver.name not in existing:
            continue
        metadata[table.target] = _metadata(engine, silver)
        if (files := metadata[table.target].files) is not None:
            to_count[table.target] = TableToCount(silver, files)
        tombstones = tombstones_of(silver)
        if tombstones.name in existing and _exact_rows(kept := _refreshed(engine, tombstones)) != 0:
            keys_of[table.target] = TableToCount(tombstones, table_files(kept), table.silver_key())
    counts = count_rows_and_tombstones(engine, to_count, keys_of)
    journals = Journals(schema_changes, quarantined, bad_rows, held_keys)
    return _DatabaseFacts(frozenset(existing), journals, listing, archive, metadata, dict(counts))


def _status_of(engine: Engine, table: TableConfig, facts: _DatabaseFacts, now: datetime) -> TableStatus:
    """One table's status from the database's facts (and its own ledger and history lag)."""
    silver = engine.silver_table(table)
    name = f"{engine.config.database}.{table.target}"
    if table.target not in facts.metadata:
        return absent_status(table, name, facts.listing)
    metadata = facts.metadata[table.target]
    exact = metadata.exact_rows
    lag = history_lag(engine, table)
    reading = SilverReading(
        ledger=read_ledger(engine.spark, silver, facts.archive),
        rows=exact if exact is not None else facts.counts.get(("rows", table.target), 0),
        snapshots=metadata.snapshots,
        latest_change=metadata.latest_change,
        tombstones=facts.counts.get(("tombstones", table.target), 0),
        history_behind=lag.describe() if lag else None,
    )
    status = existing_status(table, name, facts.listing, facts.journals, reading, now)
    return replace(
        status,
        undeclared_columns=_undeclared_columns(engine, table, held_files(table, facts.listing, facts.journals)),
        history_note=status.history_note or history_note(engine, table, silver, reading.rows, facts.existing),
    )


def history_note(
    engine: Engine, table: TableConfig, silver: SilverTable, rows: int, existing: frozenset[str] | None = None
) -> str:
    """Empty for a table without history or with a history that reaches back to its load; else since
    when it reaches back (``history: true`` turned on after the load, ``lake.history.start_history``),
    or that it starts with the next batch. ``existing``: the database's table names, when known."""
    if not table.history:
        return ""
    history = history_of(silver)
    if existing is None:
        started = history_started(engine.spark, history)
    else:  # history_started without asking the catalog again whether the table exists
        started = history.name in existing and current_snapshot_id(engine.spark, history.identifier) is not None
    if not started:
        return "history not started: starts from silver's rows with the next batch" if rows else ""
    since = IcebergTable.load(engine.spark, history.identifier).property(HISTORY_SINCE_PROPERTY)
    return f"history since {since} (started from silver's rows; no versions before)" if since else ""


def _undeclared_columns(engine: Engine, table: TableConfig, held: Sequence[BronzeFile]) -> str:
    """The header columns of the table's held CSV files that its declared columns lack (as they
    are now: once declared, they are no longer listed)."""
    return undeclared_columns(engine.config, engine.store, table, held)

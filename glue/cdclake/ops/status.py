"""Per-table status and ad-hoc queries on the silver catalog (read-only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.config import TableConfig
from cdclake.dms.files import BronzeFile, FileKind
from cdclake.dms.layout import parse_header, undeclared_header_columns
from cdclake.dms.store import head_text, list_bronze
from cdclake.engine.history_sync import history_lag
from cdclake.engine.select import TableState, load_again, unloaded_load_files
from cdclake.errors import BadInputError, LoadFilesConflictError
from cdclake.lake.history import HISTORY_SINCE_PROPERTY, history_of, history_started
from cdclake.lake.journals import (
    QUARANTINE_ROWS_TABLE,
    QUARANTINE_TABLE,
    SCHEMA_CHANGES_TABLE,
    quarantined_files_by_table,
    tombstones_of,
)
from cdclake.lake.ledger import LATEST_COMMIT_TS_PROPERTY, read_ledger
from cdclake.lake.tables import SilverTable, table_exists, table_property
from cdclake.ops.metrics import freshness_lag

if TYPE_CHECKING:
    from cdclake.context import Engine


@dataclass(frozen=True)
class TableStatus:
    source: str
    silver_table: str
    exists: bool
    rows: int | None = None
    snapshots: int | None = None
    files_applied: int | None = None
    last_applied_file: str | None = None
    latest_change: str | None = None  # newest source commit timestamp applied
    lag_seconds: float | None = None  # now - latest_change
    tombstones: int | None = None  # deleted keys remembered so late changes cannot revive them
    schema_changes: int = 0  # entries in cdclake_schema_changes
    last_schema_change: str | None = None
    quarantined_files: int = 0  # entries in cdclake_quarantine
    quarantined_rows: int = 0  # bad rows held in cdclake_quarantine_rows
    pending_files: int = 0  # CDC files in bronze neither applied nor held
    unloaded_load_files: str = ""  # LOAD files in bronze the table's full load does not hold (names)
    undeclared_columns: str = ""  # header columns of held files that the declared columns lack
    behind: str = ""  # why silver is not up to date with bronze, or "up to date"
    history_note: str = ""  # a history behind silver, or not reaching back to the load: since when, or not started


NO_FILES = "no files yet"


def no_files_yet(table: TableConfig, in_bronze: bool, files_applied: int) -> str | None:
    """Why a configured table has nothing to show, or None once a file arrived: bronze holds no
    file that may hold its rows now, and none was ever applied. Never "up to date": an empty silver table
    is then no evidence that the source is empty."""
    if in_bronze or files_applied:
        return None
    return (
        f"{NO_FILES}: bronze has no LOAD or CDC file under {table.source_schema}/{table.source_table}/ "
        "(a table empty at the source gets none; otherwise check that `cdclake capture` or the DMS task "
        "includes it)"
    )


def _lag(latest: str | None, now: datetime) -> float | None:
    """Freshness lag in seconds, to a tenth (None when the newest commit time is unknown)."""
    seconds = freshness_lag(latest, now)
    return None if seconds is None else round(seconds, 1)


def _journal_counts(engine: Engine, journal: str, time_column: str, detail: str) -> dict[str, tuple[int, Any]]:
    """Per silver table: how many journal entries, and the newest one's ``detail``."""
    table = SilverTable(engine.catalog, engine.config.database, journal)
    if not table_exists(engine.spark, table):
        return {}
    rows = engine.spark.sql(
        f"SELECT silver_table, count(*) AS n, max_by({detail}, {time_column}) AS last "
        f"FROM {table.identifier} GROUP BY silver_table"
    ).collect()
    return {r["silver_table"]: (r["n"], r["last"]) for r in rows}


def table_statuses(engine: Engine, now: datetime | None = None) -> list[TableStatus]:
    """One status per configured table, read from the Iceberg metadata tables and the journals."""
    now = now or datetime.now(UTC)
    schema_changes = _journal_counts(engine, SCHEMA_CHANGES_TABLE, "changed_at", "change")
    quarantined = _journal_counts(engine, QUARANTINE_TABLE, "quarantined_at", "reason")
    bad_rows = _journal_counts(engine, QUARANTINE_ROWS_TABLE, "quarantined_at", "reason")
    listing = list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path)
    held_keys = quarantined_files_by_table(engine.spark, engine.catalog, engine.config.database)
    statuses = []
    for table in engine.config.tables:
        silver = engine.silver_table(table)
        name = f"{engine.config.database}.{table.target}"
        loads = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
        cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
        arrived = listing.may_hold(table.source_schema, table.source_table)
        if not table_exists(engine.spark, silver):
            reason = no_files_yet(table, arrived, 0) or (
                f"not loaded: {len(loads)} full-load and {len(cdc)} CDC files in bronze"
            )
            statuses.append(TableStatus(table.source, name, exists=False, pending_files=len(cdc), behind=reason))
            continue
        ledger = read_ledger(engine.spark, silver)
        state = TableState(ledger.full_load_done, ledger.applied, frozenset(), ledger.loaded)
        held, last_reason = quarantined.get(table.target, (0, None))
        held_rows, last_row_reason = bad_rows.get(table.target, (0, None))
        pending = [f for f in cdc if f.key not in ledger.applied]
        waiting = len(pending) - held
        rows = engine.spark.table(silver.identifier).count()
        summary = engine.spark.sql(
            f"SELECT count(*) AS n, max(summary['{LATEST_COMMIT_TS_PROPERTY}']) AS latest "
            f"FROM {silver.metadata('snapshots')}"
        ).first()
        latest = summary["latest"] if summary else None
        tombstones = tombstones_of(silver)
        tombstone_count = (
            engine.spark.table(tombstones.identifier).select(*table.silver_key()).distinct().count()
            if table_exists(engine.spark, tombstones)
            else 0
        )
        changes, last_change = schema_changes.get(table.target, (0, None))
        lag = history_lag(engine, table)
        history_behind = lag.describe() if lag else None
        statuses.append(
            TableStatus(
                source=table.source,
                silver_table=name,
                exists=True,
                rows=rows,
                snapshots=summary["n"] if summary else 0,
                files_applied=len(ledger.applied),
                last_applied_file=ledger.last_file,
                latest_change=latest,
                lag_seconds=_lag(latest, now),
                tombstones=tombstone_count,
                schema_changes=changes,
                last_schema_change=last_change,
                quarantined_files=held,
                pending_files=max(waiting, 0),
                quarantined_rows=held_rows,
                unloaded_load_files=", ".join(f.name for f in unloaded_load_files(state, loads)),
                undeclared_columns=_undeclared_columns(
                    engine, table, [f for f in cdc if f.key in held_keys.get(table.target, ())]
                ),
                history_note=history_behind or history_note(engine, table, silver, rows),
                behind=no_files_yet(table, arrived, len(ledger.applied))
                or _behind(
                    ledger.full_load_done,
                    bool(loads),
                    max(waiting, 0),
                    (held, last_reason),
                    (held_rows, last_row_reason),
                    _unloaded(table, state, loads),
                    history_behind,
                ),
            )
        )
    return statuses


def history_note(engine: Engine, table: TableConfig, silver: SilverTable, rows: int) -> str:
    """Empty for a table without history or with a history that reaches back to its load; else since
    when it reaches back (``history: true`` turned on after the load, ``lake.history.start_history``),
    or that it starts with the next batch."""
    if not table.history:
        return ""
    history = history_of(silver)
    if not history_started(engine.spark, history):
        return "history not started: starts from silver's rows with the next batch" if rows else ""
    since = table_property(engine.spark, history, HISTORY_SINCE_PROPERTY)
    return f"history since {since} (started from silver's rows; no versions before)" if since else ""


def _undeclared_columns(engine: Engine, table: TableConfig, held: Sequence[BronzeFile]) -> str:
    """The header columns of the table's held CSV files that its declared columns lack (as they
    are now: once declared, they are no longer listed)."""
    settings = engine.config.bronze
    if not (settings.csv_header and table.columns):
        return ""
    names: list[str] = []
    for file in held:
        if file.file_format != "csv":
            continue
        try:
            header = parse_header(head_text(engine.store, file), settings.csv_delimiter, file.key)
        except BadInputError:
            continue  # held for another reason: status names that one
        undeclared, _ = undeclared_header_columns(settings, table, header)
        names += [name for name in undeclared if name not in names]
    return ", ".join(names)


def _unloaded(table: TableConfig, state: TableState, loads: Sequence[BronzeFile]) -> str | None:
    """LOAD files the table's full load does not hold, and the command that loads them (or None)."""
    unloaded = unloaded_load_files(state, loads)
    if not unloaded:
        return None
    names = ", ".join(f.name for f in unloaded)
    try:
        load_again(table, state, loads)
    except LoadFilesConflictError:
        return f"LOAD file(s) not loaded: {names} (beside loaded ones, after CDC: `cdclake run` says what to do)"
    return f"LOAD file(s) not loaded: {names} (`cdclake run` loads them)"


def _behind(
    loaded: bool,
    has_loads: bool,
    waiting: int,
    files: tuple[int, str | None] = (0, None),
    rows: tuple[int, str | None] = (0, None),
    unloaded: str | None = None,
    history: str | None = None,
) -> str:
    """Why a table is behind bronze, in one phrase (or "up to date"): ``files`` and ``rows`` held
    in quarantine, each with the newest one's reason, LOAD files not loaded (``unloaded``), and a
    history behind silver (``history``)."""
    held, last_reason = files
    held_rows, last_row_reason = rows
    reasons = [unloaded] if unloaded else []
    if not loaded and has_loads:
        reasons.append("full load not applied")
    if waiting:
        reasons.append(f"{waiting} CDC file(s) not applied yet")
    if held:
        reasons.append(f"{held} file(s) held in quarantine (last: {last_reason}); `cdclake replay --quarantined`")
    if held_rows:
        reasons.append(
            f"{held_rows} row(s) held in quarantine (last: {last_row_reason}); fix them in bronze, then "
            "`cdclake replay --quarantined`"
        )
    if history:
        reasons.append(history)
    return "; ".join(reasons) or "up to date"


def statuses_as_rows(statuses: Sequence[TableStatus]) -> tuple[list[str], list[list[Any]]]:
    """Every field of every status (the csv and json formats, and ``status --wide``)."""
    columns = list(TableStatus.__dataclass_fields__)
    return columns, [list(asdict(s).values()) for s in statuses]


# The compact view's STATE column: one short marker per field that needs the user's attention,
# shown when the field's value is truthy (a count above 0, a non-empty list). A new per-table
# field appears in --wide, csv and json by being a TableStatus field, and in the compact view by
# one entry here.
ATTENTION_MARKERS: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("pending_files", lambda n: f"{n} pending"),
    ("quarantined_files", lambda n: f"{n} held"),
    ("quarantined_rows", lambda n: f"{n} rows held"),
    ("unloaded_load_files", lambda names: f"LOAD files not loaded: {names}"),
    ("undeclared_columns", lambda names: f"undeclared header columns: {names}"),
    ("history_note", lambda note: note),
)


def attention(status: TableStatus) -> list[str]:
    """The compact view's markers for ``status``, in ``ATTENTION_MARKERS`` order."""
    values = asdict(status)
    return [marker(values[name]) for name, marker in ATTENTION_MARKERS if values.get(name)]

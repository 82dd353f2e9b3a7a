"""A table's status, made from what was read of it: the fields, why a table is behind bronze, and
the compact view's markers.

Pure but for the held files' headers read through the store handed in: both paths build their
statuses here, ``ops.status`` (Spark) and ``ops.status_local`` (a local warehouse with no JVM),
so they say the same thing of the same warehouse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from cdclake.columns import HISTORY_SUFFIX, TOMBSTONE_SUFFIX
from cdclake.config import PipelineConfig, TableConfig, gold_database
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind
from cdclake.dms.layout import parse_header, undeclared_header_columns
from cdclake.dms.store import BronzeStore, head_text
from cdclake.engine.select import TableState, load_again, unloaded_load_files
from cdclake.errors import BadInputError, LoadFilesConflictError
from cdclake.lake.ledger import LedgerState
from cdclake.lake.tables import SilverTable
from cdclake.ops.metrics import freshness_lag
from cdclake.schema import is_type_change, type_change_advice


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
    held_by_capture: str = ""  # why `cdclake capture` holds the table (its changes are not captured), or ""
    # a table of the silver database that no configured table writes (a renamed or mistyped one's
    # leftover): what it is and what to do, or "" (its ``source`` is then its silver name)
    not_configured: str = ""


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


HELD_BY_CAPTURE = "held by capture"


NOT_CONFIGURED = "not configured"


def stray_tables(config: PipelineConfig, existing: Iterable[str]) -> list[str]:
    """The tables of the silver database (``existing``) that no configured table writes: neither a
    configured target, nor the side tables cdclake keeps beside one (``__history``, ``__tombstones``),
    nor its own journals and ledger (``cdclake_*``), nor a mart kept there. Sorted."""
    ours = {t.target for t in config.tables}
    marts = {m.name for m in config.gold.marts} if gold_database(config) == config.database else set()
    return sorted(
        name
        for name in existing
        if name not in ours | marts
        and not name.startswith("cdclake_")
        and not name.endswith((HISTORY_SUFFIX, TOMBSTONE_SUFFIX))
    )


def stray_status(table: SilverTable, rows: int | None) -> TableStatus:
    """The status of a silver table no configured table writes (``stray_tables``), with its rows
    as its metadata says them (None: not known)."""
    return TableStatus(
        table.name,
        f"{table.database}.{table.name}",
        exists=True,
        rows=rows,
        behind=f"{NOT_CONFIGURED}: no configured table writes this silver table (a renamed or mistyped table's "
        f"leftover?); drop it once you are sure: DROP TABLE {table.identifier}",
        not_configured=NOT_CONFIGURED,
    )


@dataclass(frozen=True)
class Journals:
    """What the database's journals say of each silver table, read once for the database (by the
    Spark path here, or with no JVM by ``ops.status_local``)."""

    schema_changes: dict[str, tuple[int, Any]]  # by silver table: count, latest
    quarantined: dict[str, tuple[int, Any]]  # files held: count, last reason
    bad_rows: dict[str, tuple[int, Any]]  # rows held: count, last reason
    held_keys: Mapping[str, frozenset[str]]  # the keys of the files held


@dataclass(frozen=True)
class SilverReading:
    """What a path read of one silver table that exists: its ledger, rows and snapshots."""

    ledger: LedgerState
    rows: int
    snapshots: int
    latest_change: str | None
    tombstones: int
    history_behind: str | None = None  # history's lag, said (the Spark path reads it)


def absent_status(table: TableConfig, name: str, listing: BronzeListing) -> TableStatus:
    """The status of a configured table that has no silver table yet."""
    loads = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
    cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
    arrived = listing.may_hold(table.source_schema, table.source_table)
    reason = no_files_yet(table, arrived, 0) or f"not loaded: {len(loads)} full-load and {len(cdc)} CDC files in bronze"
    return TableStatus(table.source, name, exists=False, pending_files=len(cdc), behind=reason)


def held_files(table: TableConfig, listing: BronzeListing, journals: Journals) -> list[BronzeFile]:
    """The table's CDC files in bronze that quarantine holds."""
    held = journals.held_keys.get(table.target, frozenset())
    cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
    return [f for f in cdc if f.key in held]


def existing_status(
    table: TableConfig, name: str, listing: BronzeListing, journals: Journals, reading: SilverReading, now: datetime
) -> TableStatus:
    """The status of a table whose silver table exists, from what a path read of it (``reading``)
    and the database's journals; the undeclared columns and the history note are each path's own
    reads (empty here)."""
    loads = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
    cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
    arrived = listing.may_hold(table.source_schema, table.source_table)
    ledger = reading.ledger
    state = TableState(
        ledger.full_load_done, ledger.applied, frozenset(), ledger.loaded, cdc_since_load=ledger.cdc_applied
    )
    held, last_reason = journals.quarantined.get(table.target, (0, None))
    held_rows, last_row_reason = journals.bad_rows.get(table.target, (0, None))
    waiting = max(len([f for f in cdc if f.key not in ledger.applied]) - held, 0)
    changes, last_change = journals.schema_changes.get(table.target, (0, None))
    behind = no_files_yet(table, arrived, len(ledger.applied)) or _behind(
        table.source,
        ledger.full_load_done,
        bool(loads),
        waiting,
        (held, last_reason),
        (held_rows, last_row_reason),
        _unloaded(table, state, loads),
        reading.history_behind,
    )
    return TableStatus(
        source=table.source,
        silver_table=name,
        exists=True,
        rows=reading.rows,
        snapshots=reading.snapshots,
        files_applied=len(ledger.applied),
        last_applied_file=ledger.last_file,
        latest_change=reading.latest_change,
        lag_seconds=_lag(reading.latest_change, now),
        tombstones=reading.tombstones,
        schema_changes=changes,
        last_schema_change=last_change,
        quarantined_files=held,
        pending_files=waiting,
        quarantined_rows=held_rows,
        unloaded_load_files=", ".join(f.name for f in unloaded_load_files(state, loads)),
        history_note=reading.history_behind or "",
        behind=behind,
    )


def held_by_capture(status: TableStatus, reason: str) -> TableStatus:
    """``status`` of a table capture holds: its changes from the held one on are not in bronze."""
    behind = "" if status.behind == "up to date" else f"; {status.behind}"
    return replace(status, held_by_capture=reason, behind=f"{HELD_BY_CAPTURE}: {reason}{behind}")


def undeclared_columns(
    config: PipelineConfig, store: BronzeStore, table: TableConfig, held: Sequence[BronzeFile]
) -> str:
    """``_undeclared_columns`` from the configuration and bronze alone (no engine)."""
    settings = config.bronze
    if not (settings.csv_header and table.columns):
        return ""
    names: list[str] = []
    for file in held:
        if file.file_format != "csv":
            continue
        try:
            header = parse_header(head_text(store, file), settings.csv_delimiter, file.key)
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
    source: str,
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
        advice = type_change_advice(source) if is_type_change(last_reason) else "`cdclake replay --quarantined`"
        reasons.append(f"{held} file(s) held in quarantine (last: {last_reason}); {advice}")
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
    ("held_by_capture", lambda _reason: HELD_BY_CAPTURE),
    ("not_configured", lambda marker: marker),
)


def attention(status: TableStatus) -> list[str]:
    """The compact view's markers for ``status``, in ``ATTENTION_MARKERS`` order."""
    values = asdict(status)
    return [marker(values[name]) for name, marker in ATTENTION_MARKERS if values.get(name)]

"""What the quarantine holds, per file, and dismissing the entries whose file is gone from bronze.

A held file (``cdclake_quarantine``) or a file with bad rows (``cdclake_quarantine_rows``) is
resolved by fixing it in bronze and replaying it (``cdclake replay --quarantined``). A file that
was deleted from bronze cannot be replayed: its entries are dismissed instead, and the dismissal
is recorded in ``cdclake_quarantine_dismissed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.dms.store import list_bronze
from cdclake.errors import CdclakeError
from cdclake.lake.journals import QUARANTINE_ROWS_TABLE, QUARANTINE_TABLE, dismiss_quarantine
from cdclake.lake.tables import SilverTable, table_exists

if TYPE_CHECKING:
    from cdclake.config import TableConfig
    from cdclake.context import Engine

GONE = "the file is no longer in bronze"


@dataclass(frozen=True)
class QuarantineEntry:
    """One file in the quarantine: held whole (``row`` None) or one of its bad rows."""

    table: str  # the source table, schema.table
    file_key: str
    row: int | None  # the bad row's number in the file (1-based data rows); None: the whole file
    reason: str
    raw: str | None  # the bad row as it was in the file
    quarantined_at: datetime
    in_bronze: bool


def quarantine_entries(engine: Engine, tables: Sequence[TableConfig] | None = None) -> list[QuarantineEntry]:
    """Every held file and bad row of ``tables`` (default: all), by table, file and row."""
    chosen = list(tables or engine.config.tables)
    by_name = {engine.silver_table(t).name: t for t in chosen}
    present = {f.key for f in list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path).files}
    entries = []
    for journal_name, has_rows in ((QUARANTINE_TABLE, False), (QUARANTINE_ROWS_TABLE, True)):
        journal = SilverTable(engine.catalog, engine.config.database, journal_name)
        if not table_exists(engine.spark, journal):
            continue
        for r in engine.spark.table(journal.identifier).collect():
            table = by_name.get(r["silver_table"])
            if table is None:
                continue
            entries.append(
                QuarantineEntry(
                    table=table.source,
                    file_key=r["file_key"],
                    row=r["row_number"] if has_rows else None,
                    reason=r["reason"],
                    raw=r["raw"] if has_rows else None,
                    quarantined_at=r["quarantined_at"],
                    in_bronze=r["file_key"] in present,
                )
            )
    return sorted(entries, key=lambda e: (e.table, e.file_key, e.row or 0))


def entries_as_rows(entries: Sequence[QuarantineEntry]) -> tuple[list[str], list[list[Any]]]:
    columns = ["table", "file", "row", "reason", "raw", "quarantined_at", "in_bronze"]
    return columns, [[e.table, e.file_key, e.row, e.reason, e.raw, e.quarantined_at, e.in_bronze] for e in entries]


@dataclass(frozen=True)
class Dismissed:
    table: str
    file_key: str
    files: int  # entries of the file held whole (0 or 1)
    rows: int  # bad rows of the file


def dismiss_missing(
    engine: Engine, keys: Sequence[str] = (), tables: Sequence[TableConfig] | None = None
) -> list[Dismissed]:
    """Dismiss the quarantine entries of files no longer in bronze: those named by ``keys``, or
    (no keys) every such file of ``tables``. Each dismissal is recorded; a named file that is
    still in bronze is refused (fix it and replay it instead), and so is a key with no entry."""
    entries = quarantine_entries(engine, tables)
    known = {e.file_key for e in entries}
    if unknown := sorted(set(keys) - known):
        raise CdclakeError(f"Nothing is held in quarantine for {', '.join(unknown)} (`cdclake quarantine list`).")
    if present := sorted({e.file_key for e in entries if e.in_bronze and e.file_key in keys}):
        raise CdclakeError(
            f"{', '.join(present)} is still in bronze: fix it there and run `cdclake replay --quarantined`, "
            "or delete it from bronze first if it is not to be applied."
        )
    gone = [e for e in entries if not e.in_bronze and (not keys or e.file_key in keys)]
    now = datetime.now(UTC)
    done = []
    for table in engine.config.tables:
        files = sorted({e.file_key for e in gone if e.table == table.source})
        for key, n_files, n_rows in dismiss_quarantine(engine.spark, engine.silver_table(table), files, GONE, now):
            done.append(Dismissed(table.source, key, n_files, n_rows))
    return done

"""The capture's first run: the replication slot, its exported snapshot, and the full load from it."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from cdclake.dms.writer import Value, csv_text, load_file_name, write_durably
from cdclake.identifiers import IDENTIFIER, name_problem, quote_pg
from cdclake.sources.postgres.catalog import (
    SourceTable,
    configuration_yaml,
    read_tables,
    value_text,
)
from cdclake.sources.postgres.pgoutput import format_lsn, parse_lsn
from cdclake.sources.postgres.problems import CaptureError, SourceAccessError, capture_problems
from cdclake.sources.postgres.settings import CaptureReport, CaptureSettings, connect
from cdclake.sources.postgres.state import CaptureState, change_sequence, state_path, timestamp_text

log = logging.getLogger("cdclake.capture")

# --------------------------------------------------------------------------- full load


class _CopyRows:
    """A file-like sink for ``COPY ... TO STDOUT`` (text format) that yields parsed rows."""

    _ESCAPES: ClassVar[dict[str, str]] = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
    _ESCAPE = re.compile(r"\\(.)")

    def __init__(self) -> None:
        self.pending = b""
        self.rows: list[list[str | None]] = []

    def write(self, data: bytes | str) -> int:
        chunk = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        lines = (self.pending + chunk).split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            self.rows.append([self._field(f) for f in line.decode("utf-8").split("\t")])
        return len(data)

    def _field(self, text: str) -> str | None:
        if text == "\\N":
            return None
        if "\\" not in text:
            return text
        return self._ESCAPE.sub(lambda m: self._ESCAPES.get(m.group(1), m.group(1)), text)


def _full_load(
    settings: CaptureSettings,
    conn: Any,
    snapshot: str,
    tables: Sequence[SourceTable],
    consistent_lsn: int,
    loaded_at: str,
) -> CaptureReport:
    """Copy every table in the exported snapshot into LOAD files (one folder per non-empty table).

    ``loaded_at`` (the timestamp column) is the server's clock read before the slot was created,
    so every change decoded from the slot commits at or after it and orders after the full load.
    """
    report = CaptureReport()
    sequence = change_sequence(consistent_lsn, 0)
    with conn.cursor() as cur:
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
        for table in tables:
            converters = [value_text(c.pg_type) for c in table.columns]
            columns = ", ".join(quote_pg(c.name) for c in table.columns)
            sink = _CopyRows()
            cur.copy_expert(
                f"COPY (SELECT {columns} FROM {quote_pg(table.schema)}.{quote_pg(table.name)}) TO STDOUT", sink
            )
            records: list[list[Value]] = [
                [loaded_at, *[None if v is None else f(v) for f, v in zip(converters, row, strict=True)], sequence]
                for row in sink.rows
            ]
            folder = settings.bronze / table.schema / table.name
            header = csv_text(
                [[settings.timestamp_column, *(c.name for c in table.columns), settings.change_sequence_column]]
            )
            for number, start in enumerate(range(0, len(records), settings.rows_per_load_file), start=1):
                path = folder / load_file_name(number)
                text = header + csv_text(records[start : start + settings.rows_per_load_file])
                write_durably(path, text.encode("utf-8"))
                report.load_files += 1
                report.files.append(str(path.relative_to(settings.bronze)))
            report.load_rows += len(records)
            report.loaded_tables.append(table.qualified)
            log.info("full load table=%s rows=%d", table.qualified, len(records))
        cur.execute("COMMIT")
    return report


def usable_tables(settings: CaptureSettings, tables: Sequence[SourceTable]) -> list[SourceTable]:
    """``tables`` that capture can publish and the configuration can name; the others stop capture
    (a replica identity that would lose deletes, a column named like capture's own) or, when no
    configuration chose them, are left out with a warning (a name no configuration can hold)."""
    usable = []
    for table in tables:
        bad = [
            f"'{n}': {problem}"
            for n in (table.schema, table.name, *(c.name for c in table.columns))
            if (problem := name_problem(n))
        ]
        if bad:
            log.warning("table %s skipped: names cdclake cannot configure: %s", table.qualified, "; ".join(bad))
        elif table.primary_key and table.replica_identity not in ("d", "f"):
            raise CaptureError(
                f"Table {table.qualified} has REPLICA IDENTITY {table.replica_identity!r}: deletes would not carry "
                f"its primary key. Run ALTER TABLE {table.qualified} REPLICA IDENTITY DEFAULT (or FULL)."
            )
        elif {settings.timestamp_column, settings.change_sequence_column} & {c.name for c in table.columns}:
            raise CaptureError(f"Table {table.qualified} has a column named like capture's own columns.")
        else:
            usable.append(table)
    return usable


def require_ready(conn: Any, read: Sequence[str], publish: Sequence[str], new_slot: bool) -> None:
    """Stop with one sentence naming every grant and setting the user of ``conn`` lacks to read
    ``read``, publish ``publish`` and replicate (and, when ``new_slot``, create a slot)."""
    problem = capture_problems(conn, read, publish, new_slot)
    if problem is not None:
        raise SourceAccessError(problem)


def _selected_tables(settings: CaptureSettings, conn: Any) -> list[SourceTable]:
    with conn.cursor() as cur:
        tables = read_tables(cur, settings.schemas, settings.tables)
    usable = usable_tables(settings, tables)
    if not usable:
        raise CaptureError(f"No tables to capture in schema(s) {', '.join(settings.schemas)}.")
    return usable


def _slot_exists(conn: Any, slot: str) -> bool:
    """Whether ``slot`` exists; a slot of another database (slots are per server) is an error."""
    with conn.cursor() as cur:
        cur.execute("SELECT database, current_database() FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
    if row is not None and row[0] != row[1]:
        raise CaptureError(f"The replication slot {slot} belongs to database {row[0]}: choose another --slot.")
    return row is not None


def publication_names(settings: CaptureSettings, tables: Sequence[SourceTable]) -> list[tuple[str, list[str], str]]:
    """(publication, its tables, what it publishes): keyed tables publish every change, keyless
    ones inserts only. Both publications exist from the first capture on, empty or not: a table
    added later joins one, and pgoutput fails on a publication its changes predate."""
    keyed = [t.qualified for t in tables if t.primary_key]
    keyless = [t.qualified for t in tables if not t.primary_key]
    return [
        (settings.publication, keyed, "insert, update, delete"),
        (f"{settings.publication}_inserts", keyless, "insert"),
    ]


def decoded_publications(settings: CaptureSettings, state: CaptureState) -> list[str]:
    """The publications changes are decoded through: those the first capture created (a state
    written before they were recorded: the non-empty ones, as capture then created)."""
    if state.publications:
        return list(state.publications)
    return [name for name, members, _ in publication_names(settings, state.tables) if members]


def _published(cur: Any, publication: str) -> set[str]:
    """The tables (``schema.table``) in ``publication`` now."""
    cur.execute("SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s", (publication,))
    return {row[0] for row in cur.fetchall()}


def _listed(members: Sequence[str]) -> str:
    return ", ".join(".".join(quote_pg(p) for p in m.split(".")) for m in members)


# --------------------------------------------------------------------------- who owns the slot

_OWNER_MARK = "cdclake capture "


def _owner_comment(settings: CaptureSettings) -> str:
    """What the publications' comment records: the slot, and the state directory and configuration
    of the capture that created them (the server is where another state directory can see it)."""
    owner = {"slot": settings.slot, "state_dir": str(settings.state_dir.resolve())}
    if settings.config_path is not None:
        owner["config"] = str(settings.config_path.resolve())
    return _OWNER_MARK + json.dumps(owner)


def _owners(conn: Any) -> dict[str, dict[str, str]]:
    """slot -> the owner recorded in a cdclake publication's comment."""
    with conn.cursor() as cur:
        cur.execute("SELECT obj_description(oid, 'pg_publication') FROM pg_publication")
        comments = [row[0] for row in cur.fetchall()]
    owners: dict[str, dict[str, str]] = {}
    for comment in comments:
        if comment and comment.startswith(_OWNER_MARK):
            try:
                owner = json.loads(comment[len(_OWNER_MARK) :])
            except ValueError:
                continue
            if isinstance(owner, dict) and isinstance(owner.get("slot"), str):
                owners[owner["slot"]] = owner
    return owners


def _refuse_other_owner(settings: CaptureSettings, conn: Any) -> None:
    """Stop when the slot exists and this state directory does not own it: dropping it would lose
    the changes its own capture has not read yet (and take a second full load)."""
    if state_path(settings).exists():
        return  # this state directory's own first capture, interrupted: its slot is dropped below
    owner = _owners(conn).get(settings.slot, {})
    other = owner.get("state_dir")
    if other == str(settings.state_dir.resolve()):
        return  # recorded as ours (the state file was deleted to start over)
    where = (
        f"another state directory (drop it if no capture uses it: SELECT pg_drop_replication_slot('{settings.slot}'))"
    )
    if other:
        where = f"the state directory {other}" + (f" (configuration {owner['config']})" if "config" in owner else "")
    raise CaptureError(
        f"The replication slot {settings.slot} belongs to the capture of {where}, not of {settings.state_dir}: "
        "run capture with that configuration, or choose another --slot."
    )


def initialise(settings: CaptureSettings, conn: Any) -> tuple[CaptureState, CaptureReport]:
    """Publications, the slot with its exported snapshot, and the full load taken in that snapshot.

    A slot left by an interrupted initialisation is dropped and the partial LOAD files removed,
    so the full load is always complete and consistent with the slot.
    """
    tables = _selected_tables(settings, conn)
    slot_exists = _slot_exists(conn, settings.slot)
    if slot_exists:
        _refuse_other_owner(settings, conn)
    names = [t.qualified for t in tables]
    require_ready(conn, names, names, new_slot=not slot_exists)  # before anything is created
    config = "" if settings.config_path is None else str(settings.config_path.resolve())
    publications = publication_names(settings, tables)
    # Recorded before the slot exists: a slot this state directory finds later is its own.
    pending = CaptureState(settings.slot, tables, config=config, publications=[p[0] for p in publications])
    write_durably(state_path(settings), pending.to_json().encode("utf-8"))
    with conn.cursor() as cur:
        if _slot_exists(conn, settings.slot):
            log.warning("dropping slot %s left by an interrupted first capture", settings.slot)
            cur.execute("SELECT pg_drop_replication_slot(%s)", (settings.slot,))
        for table in tables:
            _remove_partial_load(settings, table)
        for name, members, publish in publications:
            cur.execute(f"DROP PUBLICATION IF EXISTS {quote_pg(name)}")
            tables_clause = f"FOR TABLE {_listed(members)} " if members else ""
            cur.execute(f"CREATE PUBLICATION {quote_pg(name)} {tables_clause}WITH (publish = %s)", (publish,))
            cur.execute(f"COMMENT ON PUBLICATION {quote_pg(name)} IS %s", (_owner_comment(settings),))
    report, consistent_point = _load_in_new_slot(settings, conn, tables, settings.slot, temporary=False)
    state = replace(pending, full_load_done=True, consistent_point=consistent_point)
    write_durably(state_path(settings), state.to_json().encode("utf-8"))
    log.info("slot %s created at %s; full load of %d tables done", settings.slot, consistent_point, len(tables))
    if settings.config_path is not None:
        _write_configuration(settings, conn, tables)
    return state, report


def _remove_partial_load(settings: CaptureSettings, table: SourceTable) -> None:
    """Remove the LOAD files an interrupted full load of ``table`` left (it is taken again, whole)."""
    folder = settings.bronze / table.schema / table.name
    for stale in [*folder.glob("LOAD*"), *folder.glob(".*.tmp")] if folder.is_dir() else []:
        stale.unlink()


def add_tables(settings: CaptureSettings, conn: Any, state: CaptureState, new: Sequence[SourceTable]) -> CaptureReport:
    """Publish ``new`` tables (configured after the first capture) and full-load them consistently
    with the slot: a temporary slot's exported snapshot gives their LOAD files, and the changes the
    slot decodes for them are kept from that snapshot's consistent point on (``state.load_lsns``).

    The state records them only once their LOAD files are durable; until then their changes are
    not written, and an interrupted addition is taken again from the start.
    """
    new = usable_tables(settings, new)
    decoded = decoded_publications(settings, state)
    with conn.cursor() as cur:
        for name, members, _publish in publication_names(settings, new):
            if not members:
                continue
            if name not in decoded:
                raise CaptureError(
                    f"Table(s) {', '.join(members)} need the publication {name}, which this capture's first run "
                    "did not create (an older cdclake): start the capture over (drop the slot, empty the state "
                    "directory and bronze) to add them."
                )
            published = _published(cur, name)
            missing = [m for m in members if m not in published]
            if missing:
                cur.execute(f"ALTER PUBLICATION {quote_pg(name)} ADD TABLE {_listed(missing)}")
    report, consistent_point = _load_from_temporary_slot(settings, conn, new)
    state.tables = [*state.tables, *new]
    state.load_lsns.update({t.qualified: consistent_point for t in new})
    write_durably(state_path(settings), state.to_json().encode("utf-8"))
    log.info("tables added to the capture at %s: %s", format_lsn(consistent_point), ", ".join(t.qualified for t in new))
    return report


def remove_tables(settings: CaptureSettings, conn: Any, state: CaptureState, names: Sequence[str]) -> None:
    """Stop capturing ``names`` (taken out of the configuration): out of the publications and the
    state. Their files stay in bronze; a table put back in the configuration (``init --add-new``) is
    added again by the next capture, with a full load of its own."""
    with conn.cursor() as cur:
        for name in decoded_publications(settings, state):
            published = _published(cur, name)
            if leaving := [n for n in names if n in published]:
                cur.execute(f"ALTER PUBLICATION {quote_pg(name)} DROP TABLE {_listed(leaving)}")
    state.tables = [t for t in state.tables if t.qualified not in names]
    state.reloads = [name for name in state.reloads if name not in names]
    for name in names:
        state.held.pop(name, None)
        state.load_lsns.pop(name, None)
        state.layout_lsns.pop(name, None)
    write_durably(state_path(settings), state.to_json().encode("utf-8"))
    log.warning("tables no longer in the configuration, no longer captured: %s", ", ".join(names))


def reload_tables(
    settings: CaptureSettings, conn: Any, state: CaptureState, tables: Sequence[SourceTable]
) -> CaptureReport:
    """Load captured ``tables`` again, as they are now (columns and types read anew): their LOAD files
    are written again from a temporary slot's exported snapshot, the slot's changes to them are kept
    from its consistent point on, and a hold (an unlogged TOAST value) is lifted. ``cdclake run``
    sees LOAD files written again and replaces the silver table with them.

    The reload is recorded as pending (``state.reloads``) before the old LOAD files go: an
    interrupted reload is taken again from the start by the next capture, and until it is done
    the slot's changes to those tables are not written (the reload's snapshot will hold them).
    """
    tables = usable_tables(settings, tables)
    state.reloads = sorted({*state.reloads, *(t.qualified for t in tables)})
    write_durably(state_path(settings), state.to_json().encode("utf-8"))
    report, consistent_point = _load_from_temporary_slot(settings, conn, tables)
    reloaded = {t.qualified: t for t in tables}
    state.tables = [reloaded.pop(t.qualified, t) for t in state.tables]
    for name in (t.qualified for t in tables):
        state.load_lsns[name] = consistent_point
        state.held.pop(name, None)
    state.reloads = [name for name in state.reloads if name not in {t.qualified for t in tables}]
    write_durably(state_path(settings), state.to_json().encode("utf-8"))
    log.info("tables reloaded at %s: %s", format_lsn(consistent_point), ", ".join(t.qualified for t in tables))
    return report


def _load_from_temporary_slot(
    settings: CaptureSettings, conn: Any, tables: Sequence[SourceTable]
) -> tuple[CaptureReport, int]:
    """LOAD files of ``tables`` (their old ones removed first) from the snapshot a temporary slot
    exports, and that snapshot's consistent point: the slot's changes to them that commit before it
    are in the LOAD files."""
    for table in tables:
        _remove_partial_load(settings, table)
    report, consistent_point = _load_in_new_slot(settings, conn, tables, settings.slot + "_add", temporary=True)
    return report, parse_lsn(consistent_point)


def _load_in_new_slot(
    settings: CaptureSettings, conn: Any, tables: Sequence[SourceTable], slot: str, temporary: bool
) -> tuple[CaptureReport, str]:
    """Create ``slot`` with an exported snapshot and take ``tables``' LOAD files in it; returns the
    report and the slot's consistent point. A temporary slot is dropped with its connection (only
    its snapshot and consistent point are used)."""
    with conn.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        loaded_at = timestamp_text(cur.fetchone()[0])
    replication = connect(settings.dsn, replication=True)
    kind = "TEMPORARY LOGICAL" if temporary else "LOGICAL"
    try:
        with replication.cursor() as rcur:
            rcur.execute(f"CREATE_REPLICATION_SLOT {quote_pg(slot)} {kind} pgoutput EXPORT_SNAPSHOT")
            _slot, consistent_point, snapshot, _plugin = rcur.fetchone()
            # The snapshot lives as long as this connection stays idle: load everything now.
            report = _full_load(settings, conn, snapshot, tables, parse_lsn(consistent_point), loaded_at)
    finally:
        replication.close()
    return report, str(consistent_point)


def _write_configuration(settings: CaptureSettings, conn: Any, tables: Sequence[SourceTable]) -> None:
    path = settings.config_path
    assert path is not None
    if path.exists():
        log.info("configuration %s exists: left as it is", path)
        return
    database = settings.silver_database
    if database is None:
        with conn.cursor() as cur:
            cur.execute("SELECT current_database()")
            name = str(cur.fetchone()[0])
        database = name if IDENTIFIER.match(name) else "cdclake"
    bronze = os.path.relpath(settings.bronze.resolve(), path.resolve().parent)
    text = configuration_yaml(tables, bronze, database, settings.timestamp_column, settings.change_sequence_column)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_durably(path, text.encode("utf-8"))
    log.info("table configuration written to %s", path)

"""``cdclake capture``: PostgreSQL logical decoding -> DMS-format files in the bronze layout.

What stands in for AWS DMS on one machine; docs/capture.md explains the design and why. The
change stream itself, after the load, is ``change_stream.ChangeCapture``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from cdclake.sources.postgres.catalog import read_tables
from cdclake.sources.postgres.change_stream import ChangeCapture
from cdclake.sources.postgres.pgoutput import format_lsn
from cdclake.sources.postgres.problems import CaptureError, SourceAccessError, source_problem
from cdclake.sources.postgres.settings import CaptureReport, CaptureSettings, connect
from cdclake.sources.postgres.snapshot import add_tables, initialise, reload_tables, remove_tables, require_ready
from cdclake.sources.postgres.state import CaptureState, state_path

log = logging.getLogger("cdclake.capture")


def capture(settings: CaptureSettings) -> CaptureReport:
    """Initialise if needed (slot + full load), then capture changes once or until stopped. What the
    server refuses ends as one sentence with the fix (``SourceAccessError``)."""
    import psycopg2

    conn = connect(settings.dsn)
    try:
        return _capture(settings, conn)
    except psycopg2.Error as exc:  # what the checks before could not foresee (a grant revoked meanwhile)
        raise SourceAccessError(source_problem(exc, conn.info.user, conn.info.dbname)) from None
    finally:
        conn.close()


def _capture(settings: CaptureSettings, conn: Any) -> CaptureReport:
    state_file = state_path(settings)
    state = CaptureState.from_json(state_file.read_text("utf-8")) if state_file.exists() else None
    load_report = CaptureReport()
    if state is None or not state.full_load_done:
        state, load_report = initialise(settings, conn)  # asks the server what it lacks first
    else:
        captured = {t.qualified for t in state.tables}
        added = sorted(set(settings.tables) - captured)
        reload = sorted(name for name in {*settings.reload, *state.reloads} if name in captured)
        require_ready(conn, sorted({*added, *reload}), added, new_slot=bool(added or reload))
        if added:
            with conn.cursor() as cur:
                load_report = add_tables(settings, conn, state, read_tables(cur, (), added))
    if settings.configured and (removed := sorted({t.qualified for t in state.tables} - set(settings.configured))):
        remove_tables(settings, conn, state, removed)
        load_report.removed_tables = removed
    if reload := sorted({*settings.reload, *state.reloads} - set(load_report.loaded_tables)):
        unknown = [name for name in reload if name not in {t.qualified for t in state.tables}]
        if unknown:
            raise CaptureError(f"Table(s) {', '.join(unknown)} are not captured yet: nothing to reload.")
        with conn.cursor() as cur:
            again = reload_tables(settings, conn, state, read_tables(cur, (), reload))
        load_report.load_files += again.load_files
        load_report.load_rows += again.load_rows
        load_report.files.extend(again.files)
    stream = ChangeCapture(settings, state, conn)
    stream.report.load_files, stream.report.load_rows = load_report.load_files, load_report.load_rows
    stream.report.files.extend(load_report.files)
    stream.report.removed_tables = load_report.removed_tables
    try:
        while True:
            new = stream.poll()
            if not settings.follow:
                break
            if stream.due():
                stream.flush()
            if new == 0:
                time.sleep(settings.poll_interval)
    except KeyboardInterrupt:
        log.info(
            "capture stopped; %d buffered changes will be read again next time",
            sum(map(len, stream.buffers.values())),
        )
        raise
    if stream.buffers:
        stream.flush()
    stream.report.confirmed_lsn = format_lsn(stream.confirmed_lsn)
    stream.report.held = {table: reason for table, (_lsn, reason) in state.held.items()}
    return stream.report

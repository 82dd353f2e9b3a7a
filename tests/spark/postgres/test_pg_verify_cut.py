"""``verify --cut`` (``verify.postgres.at_cut``): silver at a published cut compared with the source read at the
cut's own log position, which capture was asked to stop at (``dms.cut_request``).

The source is pinned at a temporary slot's consistent point while transactions keep coming; the comparison must
find every table equal there, and the same cut against the source as it is later, or silver as it is later
against the pinned source, must differ: each side is read at the position and at no other.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from conftest import SourceDatabase, loaded_engine

from cdclake.context import Engine
from cdclake.dms.cut_request import REQUEST_KEY, CutRequest, read_request, withdraw, write_request
from cdclake.dms.notices import Polling
from cdclake.dms.progress import read_progress
from cdclake.dms.store import LocalBronze
from cdclake.engine.follow import FollowSettings, follow
from cdclake.engine.run import run
from cdclake.errors import CdclakeError
from cdclake.lake.cuts import latest_cut
from cdclake.lake.tables import SilverTable
from cdclake.verify.compare import DEFAULT_CHECKSUMS
from cdclake.verify.live import SourcePosition
from cdclake.verify.postgres.at_cut import CutWait, pin_source, verify_at_cut
from cdclake.verify.postgres.dialect import PostgresDialect
from cdclake.verify.run import verify
from local_databases import PgServer
from pg_transfers import SCHEMA, TOTAL, Transfers, start_capture

pytestmark = pytest.mark.spark


def _move(db: SourceDatabase, amount: int) -> None:
    """One transfer from busy row 1 to quiet row 1."""
    db.transaction(
        f"UPDATE busy SET balance = balance - {amount} WHERE id = 1",
        f"UPDATE quiet SET balance = balance + {amount} WHERE id = 1",
    )


def _differing(results: list[Any]) -> dict[str, list[str]]:
    return {r.table: r.differing() for r in results if not r.equal}


def test_a_cut_made_at_a_pinned_position_is_equal_to_the_source_there_and_to_nothing_else(
    source_db: SourceDatabase, make_engine: Callable[..., Engine]
) -> None:
    # GIVEN two tables captured and applied, and changes since, applied too
    engine = loaded_engine(source_db, make_engine, SCHEMA)
    bronze = source_db.bronze
    # (with nothing that stops capture meanwhile, verify --cut says what it waited for, and leaves no request)
    waiting = r"no cut was published at LSN \S+ in 1 s \(waiting for capture to stop at LSN"
    with pytest.raises(CdclakeError, match=waiting):
        verify_at_cut(engine, source_db.dsn, waits=CutWait(wait_seconds=1.0, poll_seconds=0.2))
    assert read_request(LocalBronze(bronze)) is None
    _move(source_db, 5)
    source_db.capture()
    run(engine).checked()
    # WHEN the source is pinned, more transfers follow, and capture is asked to stop at the position
    pinned = pin_source(source_db.dsn)
    try:
        for amount in (7, 11, 13):
            _move(source_db, amount)
        request = CutRequest(pinned.position, pinned.position_text, time.time() + 120)
        write_request(bronze, request)
        source_db.capture()
        source_db.capture()  # a second capture holds there too
        progress = read_progress(LocalBronze(bronze))
        assert progress is not None and progress.position == pinned.position
        report = run(engine).checked()
        assert report.cut is not None and report.cut.startswith("at "), report.cut
        cut = latest_cut(engine.spark, engine.catalog, engine.config.database)
        assert cut is not None and cut.position == f"{pinned.position:020d}"
        at = SourcePosition(clock=pinned.clock, log_position=pinned.position_text)
        # THEN silver at the cut equals the source at the position, every table, by checksums and row by row
        for checksums in (DEFAULT_CHECKSUMS, None):
            results = verify(engine, PostgresDialect(pinned.conn, at=at), checksums=checksums, cut=cut)
            assert [(r.table, r.equal, r.problem) for r in results] == [
                ("public.busy", True, ""),
                ("public.quiet", True, ""),
            ]
            assert results[0].source_rows == 40 and results[0].position.endswith(pinned.position_text)
        # AND the same cut against the source as it is now differs, in the rows moved after the position
        conn = source_db.connect()
        try:
            later = verify(engine, PostgresDialect(conn), cut=cut)
        finally:
            conn.close()
        assert _differing(later) == {"public.busy": ["id=1"], "public.quiet": ["id=1"]}
        # AND once the request is withdrawn, capture goes on, and silver as it is then differs from the pinned
        # source in those rows too
        withdraw(bronze, request)
        assert not (bronze / REQUEST_KEY).exists()
        source_db.capture()
        after = read_progress(LocalBronze(bronze))
        assert after is not None and after.position > pinned.position
        run(engine).checked()
        newer = verify(engine, PostgresDialect(pinned.conn, at=at))
        assert _differing(newer) == {"public.busy": ["id=1"], "public.quiet": ["id=1"]}
    finally:
        pinned.conn.close()


def test_verify_cut_under_a_live_workload_finds_every_table_equal_at_its_own_position(
    source_db: SourceDatabase, make_engine: Callable[..., Engine]
) -> None:
    # GIVEN transfers between a busy and a quiet table, capture --follow and run --follow all running
    engine = loaded_engine(source_db, make_engine, SCHEMA)
    transfers = Transfers(source_db)
    transfers.cross.set()
    transfers.start()
    capture = start_capture(source_db)
    rounds = threading.Thread(
        target=follow, args=(engine, FollowSettings(poll_seconds=0.3, max_run_seconds=600.0), Polling()), daemon=True
    )
    rounds.start()
    told: list[str] = []
    try:
        # WHEN verify --cut runs while they do
        cut, results = verify_at_cut(
            engine, source_db.dsn, waits=CutWait(wait_seconds=240.0, tell_seconds=0.0, tell=told.append)
        )
        moved_before = transfers.count
        # THEN it compared every table at a cut it had capture stop at, and found each equal there
        assert [(r.table, r.equal, r.problem) for r in results] == [
            ("public.busy", True, ""),
            ("public.quiet", True, ""),
        ], results
        assert results[0].position.endswith(cut.position_text.removeprefix("LSN "))
        assert read_request(LocalBronze(source_db.bronze)) is None, "the request is withdrawn"
        # AND the cut keeps the invariant, while the source has moved on since
        total = 0
        for name, sid in cut.snapshots.items():
            table = SilverTable(engine.catalog, engine.config.database, name).identifier
            total += int(engine.spark.sql(f"SELECT sum(balance) FROM {table} VERSION AS OF {sid}").collect()[0][0])
        assert total == TOTAL
        assert moved_before > 20 and any("LSN" in line for line in told), told
        # AND capture went on past the position once the request was withdrawn
        deadline = time.monotonic() + 60
        while (progress := read_progress(engine.store)) is None or f"{progress.position:020d}" <= cut.position:
            assert time.monotonic() < deadline, "capture did not go on after verify"
            time.sleep(0.2)
    finally:
        engine.stopping.set()
        rounds.join(timeout=120)
        engine.stopping.clear()
        transfers.done.set()
        transfers.join(timeout=10)
        capture.send_signal(signal.SIGTERM)
        capture.communicate(timeout=30)


def test_verify_cut_on_bronze_without_a_capture_says_why(make_engine: Callable[..., Engine]) -> None:
    # GIVEN bronze as DMS writes it: per-table files, no capture progress record
    engine = make_engine("tables:\n  public.t:\n    primary_key: [id]\n    columns: {id: int}\n")
    # THEN verify --cut says it cannot be asked, before it reaches the source
    with pytest.raises(CdclakeError, match="needs the bronze that `cdclake capture` writes"):
        verify_at_cut(engine, "host=127.0.0.1 port=1 dbname=none", waits=CutWait(wait_seconds=1.0))


def _cdclake(db: SourceDatabase, *args: str) -> list[str]:
    return [sys.executable, "-m", "cdclake.shells.cli", "-q", "--config", str(db.config_path),
            "--bronze", str(db.bronze), *args]  # fmt: skip


def test_verify_cut_on_the_command_line_waits_for_capture_and_a_run_meanwhile(
    source_db: SourceDatabase, pg_server: PgServer
) -> None:
    # GIVEN two tables captured (their full load), and a change since
    source_db.execute(SCHEMA)
    source_db.capture()
    _move(source_db, 3)
    # WHEN a user who may read the tables but not replicate runs verify --cut
    reader = f"u_{uuid.uuid4().hex[:8]}"
    source_db.execute(f"CREATE ROLE {reader} LOGIN", f"GRANT SELECT ON busy, quiet TO {reader}")
    refused = subprocess.run(
        _cdclake(source_db, "verify", "--cut", "--source", f"host=127.0.0.1 port={pg_server.port} "
                 f"dbname={source_db.name} user={reader}"),
        capture_output=True, text=True, timeout=120, cwd=source_db.workdir,
    )  # fmt: skip
    # THEN one line, before Spark starts, names what it lacks
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip() == (
        f"cdclake: Database {source_db.name} is not ready for verify --cut as user {reader}: as a superuser, run: "
        f'ALTER ROLE {reader} REPLICATION (see docs/capture.md, "What capture needs").'
    )
    # WHEN the user who can runs it, and capture and a run are run once meanwhile
    verifying = subprocess.Popen(
        _cdclake(source_db, "verify", "--cut", "--wait", "240", "--source", source_db.dsn),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=source_db.workdir,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while read_request(LocalBronze(source_db.bronze)) is None:
            assert verifying.poll() is None and time.monotonic() < deadline, "verify wrote no request"
            time.sleep(0.2)
        _move(source_db, 4)  # after the position: in neither side of the comparison
        source_db.capture()
        applied = subprocess.run(_cdclake(source_db, "run"), capture_output=True, text=True, timeout=600,
                                 cwd=source_db.workdir)  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        out, err = verifying.communicate(timeout=300)
    finally:
        verifying.kill()
    # THEN verify compared every table at the cut that run published, and found them equal
    assert verifying.returncode == 0, out + err
    assert re.search(r"verify at the cut at \S+ \S+ \(LSN [0-9A-F]+/[0-9A-F]+\)", err), err
    assert [line.split()[:2] for line in out.splitlines()] == [
        ["OK", "public.busy:"],
        ["OK", "public.quiet:"],
        ["verify:", "2"],
    ], out

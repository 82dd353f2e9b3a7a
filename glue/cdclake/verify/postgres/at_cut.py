"""``cdclake verify --cut``: every table of a published cut compared with the source as it was at the cut's own
position, so a difference is never lag and the cut's claim (every table at one source moment) is what is checked.

PostgreSQL has no reading "as of" a past moment, so the moment is chosen now and the cut is made there:

1. **The source pinned** (``pin_source``). A temporary logical slot is created with an exported snapshot; its
   consistent point P is where the slot's decoding starts, and the snapshot shows exactly the transactions
   committed before P (what PostgreSQL's own logical replication relies on to copy a table and then stream).
   A reading connection imports the snapshot in a REPEATABLE READ transaction and keeps it open; the slot is
   dropped at once (closing its connection), so no WAL is kept back for it.
2. **A cut made at P** (``dms.cut_request``). A request in bronze asks capture to stop at P: it decodes up to P,
   writes every table's buffer and its progress record at P, and holds. The next round's bound is then P and
   the round publishes the cut at P (``engine.cut``); ``await_cut`` waits for it, telling what it waits for.
   Capture may have moved past P before it read the request (the request is written just after the slot): the
   progress record then stands past P with no cut at P, and verify asks again at a new position.
3. **Compared** (``verify.run.verify`` with the cut): silver at the cut's snapshots, the source in the pinned
   transaction. The request is withdrawn once the cut is published, so capture goes on while tables are read.

Needs: bronze written by ``cdclake capture`` (a local folder with its progress record: DMS cannot be asked to stop
at a position), capture and a run running meanwhile (``--follow``, or run by hand), and a source user with
REPLICATION. The pinned transaction holds back VACUUM's horizon while verify runs, as any long read does.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.dms.cut_request import CutRequest, withdraw, write_request
from cdclake.dms.progress import read_progress
from cdclake.dms.store import LocalBronze
from cdclake.errors import CdclakeError
from cdclake.lake.cuts import PublishedCut, latest_cut
from cdclake.sources.postgres.pgoutput import parse_lsn
from cdclake.verify.compare import DEFAULT_CHECKSUMS, ChecksumSettings
from cdclake.verify.live import SourcePosition
from cdclake.verify.postgres.dialect import PostgresDialect
from cdclake.verify.result import TableComparison
from cdclake.verify.run import verify

if TYPE_CHECKING:
    from cdclake.config import TableConfig
    from cdclake.context import Engine

log = logging.getLogger("cdclake.verify")

_ASKS = 3  # positions asked for at most, when capture keeps passing them before it reads the request


@dataclass(frozen=True)
class PinnedSource:
    """A connection held in a transaction at the snapshot of source position ``position``."""

    conn: Any
    position: int
    position_text: str  # as PostgreSQL prints it
    clock: datetime  # the server's clock when the snapshot was taken, UTC without a zone


@dataclass(frozen=True)
class CutWait:
    """How long verify waits for the cut at its position, and how it tells what it waits for."""

    wait_seconds: float = 300.0
    poll_seconds: float = 0.5
    tell_seconds: float = 10.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    tell: Callable[[str], None] = field(default=lambda text: log.info("%s", text))


def pin_source(dsn: str) -> PinnedSource:
    """The source pinned at a new temporary slot's consistent point (module docstring, 1)."""
    import psycopg2

    from cdclake.sources.postgres.problems import SourceAccessError, source_problem
    from cdclake.sources.postgres.settings import connect

    replication = connect(dsn, replication=True)
    reader = None
    try:
        reader = connect(dsn)
        slot = f"cdclake_verify_{os.getpid()}_{time.monotonic_ns() % 1_000_000}"
        with replication.cursor() as cur:
            cur.execute(f"CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT")
            _, point, snapshot, _ = cur.fetchone()
        reader.set_session(isolation_level="REPEATABLE READ", readonly=True, autocommit=False)
        with reader.cursor() as cur:
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
            cur.execute("SELECT now() AT TIME ZONE 'UTC'")
            (clock,) = cur.fetchone()
    except psycopg2.Error as exc:
        if reader is not None:
            reader.close()
        raise SourceAccessError(source_problem(exc, replication.info.user, replication.info.dbname)) from None
    finally:
        replication.close()  # drops the temporary slot; the imported snapshot lives on in the reader
    return PinnedSource(reader, parse_lsn(point), point, clock)


def capture_bronze(engine: Engine) -> Path:
    """The bronze folder capture writes, where the request goes; a clear error where there is none."""
    store = engine.store
    if not isinstance(store, LocalBronze) or read_progress(store) is None:
        raise CdclakeError(
            f"verify --cut needs the bronze that `cdclake capture` writes (a local folder with its progress record); "
            f"{store.root} has none. DMS cannot be asked to stop at a source position: compare without --cut."
        )
    return store.directory


def await_cut(engine: Engine, bronze: Path, request: CutRequest, waits: CutWait) -> PublishedCut | None:
    """The cut published at ``request``'s position; None when capture moved past it without stopping there."""
    position = f"{request.position:020d}"
    deadline = waits.clock() + waits.wait_seconds
    told = waits.clock()
    while True:
        cut = latest_cut(engine.spark, engine.catalog, engine.config.database)
        if cut is not None and cut.position >= position:
            return cut if cut.position == position else None
        progress = read_progress(LocalBronze(bronze))
        if progress is not None and progress.position > request.position:
            return None
        now = waits.clock()
        if now >= deadline:
            raise CdclakeError(
                f"verify --cut: no cut was published at LSN {request.position_text} in {waits.wait_seconds:.0f} s "
                f"({_waiting_for(progress, request)}). It needs `cdclake capture --follow` and `cdclake run --follow` "
                f"running (or each run once meanwhile); `cdclake run` says why a round ends at no cut."
            )
        if now - told >= waits.tell_seconds:
            waits.tell(f"verify --cut: {_waiting_for(progress, request)}")
            told = now
        waits.sleep(waits.poll_seconds)


def _waiting_for(progress: Any, request: CutRequest) -> str:
    if progress is None or progress.position < request.position:
        return f"waiting for capture to stop at LSN {request.position_text}"
    return f"capture holds at LSN {request.position_text}: waiting for a run to publish the cut there"


def verify_at_cut(
    engine: Engine,
    dsn: str,
    tables: Sequence[TableConfig] | None = None,
    checksums: ChecksumSettings | None = DEFAULT_CHECKSUMS,
    waits: CutWait | None = None,
) -> tuple[PublishedCut, list[TableComparison]]:
    """Make a cut at a source position, then compare every table there (module docstring)."""
    waits = waits or CutWait()
    bronze = capture_bronze(engine)
    for _ in range(_ASKS):
        pinned = pin_source(dsn)
        try:
            request = CutRequest(
                pinned.position,
                pinned.position_text,
                time.time() + waits.wait_seconds,
                f"verify on {socket.gethostname()}, process {os.getpid()}",
            )
            write_request(bronze, request)
            try:
                cut = await_cut(engine, bronze, request, waits)
            finally:
                withdraw(bronze, request)
            if cut is None:
                waits.tell(f"verify --cut: capture had passed LSN {pinned.position_text} already; asking again")
                continue
            at = SourcePosition(clock=_commit_time(cut) or pinned.clock, log_position=pinned.position_text)
            return cut, verify(engine, PostgresDialect(pinned.conn, at=at), tables, checksums, cut=cut)
        finally:
            pinned.conn.close()
    raise CdclakeError(
        f"verify --cut: capture moved past the position asked for {_ASKS} times before it read the request; "
        f"try again (a capture polling less often than every few seconds makes this likelier)."
    )


def _commit_time(cut: PublishedCut) -> datetime | None:
    return datetime.fromisoformat(cut.commit_ts) if cut.commit_ts else None

"""``cdclake verify`` over a set of tables: each compared with its source table (``verify.compare``), a table that
cannot be compared skipped with the reason, never a traceback that stops the others; against a live source
(``verify.live``), a differing table compared again once silver has caught up, and only the keys that still differ
reported."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from cdclake.config import TableConfig
from cdclake.errors import first_line
from cdclake.lake.cuts import PublishedCut
from cdclake.verify.compare import DEFAULT_CHECKSUMS, ChecksumSettings, SilverSide, compare_again, compare_table
from cdclake.verify.dialect import SourceDialect, TableT
from cdclake.verify.live import (
    LiveSettings,
    SilverPosition,
    SourcePosition,
    lag_seconds,
    lag_text,
    persisting,
    wait_for_silver,
)
from cdclake.verify.result import TableComparison

if TYPE_CHECKING:
    from cdclake.context import Engine

log = logging.getLogger("cdclake.verify")


@dataclass(frozen=True)
class LiveCheck:
    """Verify against a live source (``verify.live``): how long to wait, and how far silver has applied a
    table (``verify.applied.silver_position``, handed in by the shell)."""

    settings: LiveSettings
    silver_at: Callable[[TableConfig], SilverPosition]
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    # hears what a wait waits for (``verify.live.waiting_text``): logged by default, so the user who
    # sees nothing else for up to --delivery seconds knows why
    tell: Callable[[str], None] = field(default=lambda text: log.info("%s", text))


_READS_AGAIN = 3  # reads of a differing table's ranges at most, while some of its differing source rows move


def verify(
    engine: Engine,
    dialect: SourceDialect[Any],
    tables: Sequence[TableConfig] | None = None,
    checksums: ChecksumSettings | None = DEFAULT_CHECKSUMS,
    live: LiveCheck | None = None,
    cut: PublishedCut | None = None,
) -> list[TableComparison]:
    """Compare each configured table (or ``tables``) with the source database behind ``dialect``.

    A table that cannot be compared (no source table, no silver table, a failure while reading
    either side) comes back with ``problem`` set, and the others are still compared. With ``live``,
    a differing table is compared again once silver has caught up with where the source stood when
    it was read, and only the keys that still differ are reported (``_settle``). With ``cut``, silver is
    read at the cut's snapshots (``dialect`` then reads the source at the cut's position: ``verify.postgres.at_cut``).
    """
    silver = SilverSide(engine, cut)
    selected = list(tables or engine.config.tables)
    started = dialect.position()
    schemas = sorted({t.source.split(".", 1)[0] for t in selected})
    sources = {t.qualified: t for t in dialect.read_tables(schemas)}
    results: list[TableComparison] = []
    read_at: dict[int, SourcePosition] = {}  # a differing table's position once its first read ended
    for table in selected:
        source = sources.get(table.source)
        if source is None:
            results.append(TableComparison(table=table.source, problem="no such table at the source"))
            continue

        def compare(table: TableConfig = table, source: Any = source) -> TableComparison:
            return compare_table(silver, dialect, table, source, checksums)

        began = datetime.now(UTC)
        results.append(replace(_guarded(table, compare), source_at=started, started=began, finished=datetime.now(UTC)))
        if live is not None and results[-1].read_again is not None:
            read_at[len(results) - 1] = dialect.position()
    if live is not None:
        deadline = live.clock() + live.settings.wait_seconds
        for index, noted in read_at.items():
            table, first = selected[index], results[index]

            def settle(table: TableConfig = table, first: TableComparison = first, noted: Any = noted) -> Any:
                return _settle(silver, dialect, (table, sources[table.source]), (first, noted), live, deadline)

            first_started = results[index].started
            results[index] = replace(
                _guarded(table, settle), source_at=started, started=first_started, finished=datetime.now(UTC)
            )
    return results


def _guarded(table: TableConfig, compare: Callable[[], TableComparison]) -> TableComparison:
    """``compare()``'s comparison, or the table skipped with the reason it could not be compared."""
    try:
        return compare()
    except Exception as exc:  # one table's failure is reported, and the others are compared
        problem = f"could not be compared: {type(exc).__name__}: {first_line(exc)}"
        log.error("verify table=%s %s", table.source, problem)
        log.debug("verify table=%s failure", table.source, exc_info=True)  # the traceback, for -v
        return TableComparison(table=table.source, problem=problem)


def _settle(
    silver: SilverSide,
    dialect: SourceDialect[TableT],
    tables: tuple[TableConfig, TableT],
    read: tuple[TableComparison, SourcePosition],
    live: LiveCheck,
    deadline: float,
) -> TableComparison:
    """A differing table's keys confirmed against a live source.

    Silver is waited for until it has caught up with where the source stood once the table was read
    (``noted``); then the differing ranges are read again from both sides. A key still differing whose
    source row did not move between the two reads is confirmed: silver has applied every change of that
    row the first read saw, and none came after. A key whose source row moved is read again the same way
    (``_READS_AGAIN`` reads at most); one still moving then is not confirmed, and is told as lag. A key
    that no longer differs was lag. A table silver has not caught up with by ``deadline`` is lagging.
    """
    config, source = tables
    first, noted = read
    assert first.read_again is not None
    previous, kept, rows_read, moving = first, first, first.rows_read, list[str]()
    silver_at = partial(live.silver_at, config)
    for _ in range(_READS_AGAIN):
        waited = wait_for_silver(
            silver_at, noted, live.settings, deadline, live.clock, live.sleep, live.tell, first.table
        )
        if not waited.caught_up:
            kept = replace(kept, lagging=lag_text(waited.silver, noted), lag_seconds=lag_seconds(waited.silver, noted))
            break
        again = compare_again(silver, dialect, config, source, first.read_again)
        noted = dialect.position()
        rows_read += again.rows_read
        kept = _both(kept, again)
        moving = [k for k in kept.differing() if again.source_digests.get(k) != previous.source_digests.get(k)]
        if not moving:
            break
        previous = again
    unconfirmed = [] if kept.lagging else moving  # a lagging table keeps its keys, none of them confirmed
    if unconfirmed:
        kept = replace(_without(kept, set(unconfirmed)), unconfirmed=len(unconfirmed))
        if not kept.differing_keys:
            still = f"{len(unconfirmed)} differing key(s) still changing at the source after {_READS_AGAIN} reads"
            kept = replace(kept, lagging=still)
    return replace(
        kept,
        lag_resolved=first.differing_keys - kept.differing_keys - len(unconfirmed),
        rows_read=rows_read,
        method=first.method,
        why_rows=first.why_rows,
        ranges=first.ranges,
        ranges_differing=first.ranges_differing,
        source_rows=first.source_rows,
        silver_rows=first.silver_rows,
    )


def _both(before: TableComparison, again: TableComparison) -> TableComparison:
    """The keys that differ in both comparisons, with ``again``'s differing columns and source rows."""
    kept = TableComparison(
        table=again.table,
        read_again=before.read_again,
        missing=persisting(before.missing, again.missing),
        unexpected=persisting(before.unexpected, again.unexpected),
        different=persisting(before.different, again.different),
        unlogged_defaults=persisting(before.unlogged_defaults, again.unlogged_defaults),
    )
    return replace(
        kept,
        differing_columns={k: again.differing_columns[k] for k in kept.different},
        source_digests={k: again.source_digests.get(k) for k in kept.differing()},
    )


def _without(comparison: TableComparison, keys: set[str]) -> TableComparison:
    """``comparison`` without ``keys`` (those not confirmed)."""
    kept = TableComparison(
        table=comparison.table,
        read_again=comparison.read_again,
        missing=[k for k in comparison.missing if k not in keys],
        unexpected=[k for k in comparison.unexpected if k not in keys],
        different=[k for k in comparison.different if k not in keys],
        unlogged_defaults=[k for k in comparison.unlogged_defaults if k not in keys],
    )
    return replace(
        kept,
        differing_columns={k: comparison.differing_columns[k] for k in kept.different},
        source_digests={k: comparison.source_digests.get(k) for k in kept.differing()},
    )

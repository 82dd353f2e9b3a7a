"""``cdclake verify``: compare every silver table with its source table, whatever the source engine.

Checksums of key ranges first, computed where the data is (``sources.checksum``): an equal table
sends a few numbers; only ranges that differ are read row by row, as follows.

Both sides are reduced to one canonical text per value, chosen by the column's configured Spark
type, and each row to a digest per column (8 bytes), so a differing row names the columns that
differ. The source side reads typed values through its engine's driver (``Decimal``, ``datetime``,
``bytes``, ...) and the silver side through Spark, so the comparison does not reuse the text
conversion that wrote bronze: a conversion bug shows up as a difference. Keyed tables are compared
key by key; append-only tables (no key) as multisets of rows. A table that cannot be compared is
skipped with the reason, never a traceback that stops the others; ``format_comparisons`` ends with
one summary line.

What is the source engine's lives behind one small protocol, ``SourceDialect``, one module per
engine beside its catalog reader: ``sources.postgres.verify`` (psycopg2), ``sources.mysql.verify``
(MariaDB and MySQL, PyMySQL) and ``sources.sqlserver.verify`` (python-tds). A dialect reads the
source tables and their columns' Spark types, computes the range sums in its own SQL (each kind of
canonical text, the row number, the range condition: its ``checksums`` module), names the columns
its SQL cannot write exactly (those tables are read row by row, never skipped), streams the typed
rows of given ranges, and may name values the source shows for rows it never logged (PostgreSQL's
``ADD COLUMN ... DEFAULT``). ``sources.dialects.open_dialect`` picks one by the ``--source`` URL.

Only the columns the source table has now are compared: a column dropped at the source stays in
silver (NULL from then on) and is not compared. Keys whose only differences are NULLs in silver
where the source shows a value it never logged (``unlogged_defaults``) are reported apart, as
``default not in silver``, and still make the table differ.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import time
from array import array
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from cdclake.config import TableConfig
from cdclake.errors import first_line
from cdclake.sources.checksum import (
    KeyRange,
    Sums,
    kind_of,
    range_key,
    search,
    spark_boundaries,
    spark_condition,
    spark_sums,
)
from cdclake.sources.checksum_sql import SourceTableShape, Within
from cdclake.sources.live import (
    LiveSettings,
    SilverPosition,
    SourcePosition,
    lag_seconds,
    lag_text,
    persisting,
    wait_for_silver,
)
from cdclake.types import TIMESTAMP_TYPES

if TYPE_CHECKING:
    from pyspark.sql import Column

    from cdclake.context import Engine

log = logging.getLogger("cdclake.verify")

_DECIMAL_SCALE_PREFIX = "decimal("
_NULL = "\x00NULL"

Verdict = Literal["equal", "differing", "lagging", "skipped"]


TableT = TypeVar("TableT", bound=SourceTableShape)


class SourceDialect(Protocol[TableT]):
    """One source engine's side of verify (module docstring). ``columns`` are (name, kind) pairs of
    ``sources.checksum``; ``types`` maps each column to its configured Spark type."""

    def read_tables(self, schemas: Sequence[str]) -> list[TableT]:
        """The source tables of ``schemas``, with their columns in order."""
        ...

    def sums(self, table: TableT, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]]) -> Sums:
        """The source's ``Sums`` of ``table`` (``key`` None: one range, the whole table)."""
        ...

    def rows(
        self, table: TableT, columns: Sequence[str], types: Mapping[str, str], within: Within
    ) -> Generator[tuple[Any, ...], None, None]:
        """The typed values of ``columns`` of the rows ``within`` holds, streamed; closing the
        generator ends the read."""
        ...

    def unlogged_defaults(
        self, table: TableT, columns: Sequence[str], types: Mapping[str, str]
    ) -> dict[str, list[Any]]:
        """Column -> values the source shows for rows no change was logged for (empty: none)."""
        ...

    def inexact(self, table: TableT, columns: Sequence[tuple[str, str]]) -> list[str]:
        """The columns whose canonical text this engine's SQL cannot produce exactly: compared by
        reading them, row by row, never skipped."""
        ...

    def position(self) -> SourcePosition:
        """Where the source stands now: its clock in UTC, and its log position where it has one."""
        ...


def clock_position(conn: Any, query: str) -> SourcePosition:
    """Where a source without a log position to read stands: its clock in UTC, from ``query`` (one value) on a
    DB-API connection."""
    cur = conn.cursor()
    try:
        cur.execute(query)
        (clock,) = cur.fetchone()
    finally:
        cur.close()
    return SourcePosition(clock=clock)


@dataclass
class TableComparison:
    table: str
    source_rows: int = 0
    silver_rows: int = 0
    missing: list[str] = field(default_factory=list)  # keys at the source, not in silver
    unexpected: list[str] = field(default_factory=list)  # keys in silver, not at the source
    different: list[str] = field(default_factory=list)  # keys whose content differs
    differing_columns: dict[str, list[str]] = field(default_factory=dict)  # key -> the columns that differ
    # keys that differ only by NULL in silver where the source shows an ADD COLUMN ... DEFAULT value
    # (rows older than that column and not written since)
    unlogged_defaults: list[str] = field(default_factory=list)
    problem: str = ""  # a reason the table could not be compared (it is skipped)
    # How: "checksums" (key ranges, only differing ranges read row by row) or "rows" (every row read)
    method: str = "rows"
    why_rows: str = ""  # why every row was read (columns without a canonical text), for the report
    ranges: int = 0  # key ranges whose checksums were compared
    ranges_differing: int = 0  # ranges then read row by row
    rows_read: int = 0  # rows read from the two sides to compare them value by value
    # Against a live source (``sources.live``): where the source stood when verify started, the keys that
    # differed at first and not once silver had caught up (lag), and, when silver did not catch up in time,
    # how far behind it was (the table is then lagging: its differing keys are not confirmed).
    source_at: SourcePosition | None = field(default=None, repr=False)
    started: datetime | None = None  # when its comparison started and ended (UTC)
    finished: datetime | None = None
    lag_resolved: int = 0
    unconfirmed: int = 0  # differing keys whose source rows kept moving: neither reported nor lag
    lagging: str = ""
    lag_seconds: float | None = None
    # The rows to read again to confirm a difference (None: nothing to confirm), and each differing key's
    # source row as read (its digest; None: not at the source), to tell whether it moved since
    read_again: Within | None = field(default=None, repr=False)
    source_digests: dict[str, bytes | None] = field(default_factory=dict, repr=False)

    def differing(self) -> list[str]:
        """Every differing key, of every kind."""
        return [*self.missing, *self.unexpected, *self.different, *self.unlogged_defaults]

    @property
    def position(self) -> str:
        """Where the source stood when verify started, for people ("" when it was not reached)."""
        return self.source_at.describe() if self.source_at else ""

    @property
    def differing_keys(self) -> int:
        return len(self.missing) + len(self.unexpected) + len(self.different) + len(self.unlogged_defaults)

    @property
    def equal(self) -> bool:
        return not (self.differing_keys or self.problem or self.lagging)

    @property
    def verdict(self) -> Verdict:
        """equal, differing, lagging (silver had not caught up with the source in time) or skipped."""
        if self.problem:
            return "skipped"
        return "lagging" if self.lagging else "equal" if self.equal else "differing"

    def how(self) -> str:
        """How the table was compared, in a phrase."""
        if self.method == "checksums":
            return f"checksums of {self.ranges} key range(s), {self.ranges_differing} read row by row"
        return self.why_rows or "row by row"

    def as_json(self) -> dict[str, Any]:
        """The comparison for ``--format json``."""
        return {
            "table": self.table,
            "verdict": self.verdict,
            "problem": self.problem or None,
            "source_rows": self.source_rows,
            "silver_rows": self.silver_rows,
            "method": self.method,
            "how": self.how(),
            "ranges": self.ranges,
            "ranges_differing": self.ranges_differing,
            "rows_read": self.rows_read,
            "missing": self.missing,
            "unexpected": self.unexpected,
            "different": {k: self.differing_columns.get(k, []) for k in self.different},
            "default_not_in_silver": self.unlogged_defaults,
            "source_position": self.position or None,
            "lag_resolved": self.lag_resolved,
            "unconfirmed": self.unconfirmed,
            "lagging": self.lagging or None,
            "lag_seconds": self.lag_seconds,
        }


def canonical(value: Any, spark_type: str) -> str:
    """One value (from a source driver or from Spark) as comparable text for its Spark type."""
    if value is None:
        return _NULL
    if spark_type == "boolean":
        return "true" if value else "false"
    if spark_type.startswith(_DECIMAL_SCALE_PREFIX):
        scale = int(spark_type.rstrip(")").split(",")[1])
        try:
            return str(Decimal(value).quantize(Decimal(1).scaleb(-scale)))  # same scale on both sides
        except (ArithmeticError, ValueError, TypeError):
            return str(value)  # not a number: compared as it is (it then differs), never a crash
    if spark_type == "float":
        return repr(struct.unpack("f", struct.pack("f", float(value)))[0])
    if spark_type == "double":
        return repr(float(value))
    if spark_type in TIMESTAMP_TYPES:
        if isinstance(value, datetime):
            if value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            return str(value.isoformat(sep=" ", timespec="microseconds"))  # strftime prints year 1 as "1"
        return str(value)  # silver: already formatted by Spark in UTC
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, memoryview | bytes | bytearray):
        return bytes(value).hex()
    return str(value)


_DIGEST_SIZE = 8


def value_digest(value: str) -> bytes:
    return array("q", (hash(value),)).tobytes()


def row_digest(values: Sequence[str]) -> bytes:
    """A row's digest: one per column, concatenated (equal rows, equal digests; the columns that
    differ are the chunks that differ). Python's string hash (64-bit SipHash with a key drawn per
    process): both sides are digested in one process, and it is 5x cheaper than a BLAKE2b per value."""
    return array("q", map(hash, values)).tobytes()


_NAMED_ROWS = 100_000  # keyless rows named at most (the report shows --show of them)
_SHOWN_VALUE = 24  # characters of one value in a keyless row's name
_SHOWN_ROW = 160  # characters of all its values


def row_name(columns: Sequence[str], values: Sequence[str]) -> str:
    """How verify names a row of a keyless table (it has no key to name it by): its values, each cut
    to ``_SHOWN_VALUE`` characters and all of them to ``_SHOWN_ROW``, then the MD5 of every value whole
    (12 hex digits: the same in every run and on both sides, and distinct for rows whose shown values
    agree). ``row (id=7, note=long text th…) md5:1f3870be274f``."""

    def shown(value: str) -> str:
        if value == _NULL:
            return "NULL"
        return value if len(value) <= _SHOWN_VALUE else value[: _SHOWN_VALUE - 1] + "…"

    text = ", ".join(f"{column}={shown(value)}" for column, value in zip(columns, values, strict=True))
    if len(text) > _SHOWN_ROW:
        text = text[: _SHOWN_ROW - 1] + "…"
    whole = hashlib.md5("\x1f".join(f"{len(v)}:{v}" for v in values).encode("utf-8"), usedforsecurity=False)
    return f"row ({text}) md5:{whole.hexdigest()[:12]}"


def differing_columns(columns: Sequence[str], left: bytes, right: bytes) -> list[str]:
    size = _DIGEST_SIZE
    return [c for i, c in enumerate(columns) if left[i * size : (i + 1) * size] != right[i * size : (i + 1) * size]]


def _silver_rows(
    engine: Engine, config: TableConfig, columns: Sequence[str], types: Mapping[str, str], where: Column | None = None
) -> Any:
    from pyspark.sql import functions as F

    frame = engine.spark.table(engine.silver_table(config).identifier)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        return missing
    if where is not None:
        frame = frame.where(where)
    selected = [
        F.date_format(F.col(c), "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(c) if types[c] in TIMESTAMP_TYPES else F.col(c)
        for c in columns
    ]
    return frame.select(*selected).toLocalIterator()


@dataclass(frozen=True)
class ChecksumSettings:
    """How the checksums cut a table: ranges a level, rows a range read row by row, levels."""

    split: int = 64
    row_limit: int = 5000
    depth: int = 4


DEFAULT_CHECKSUMS = ChecksumSettings()


def compare_table(
    engine: Engine,
    dialect: SourceDialect[TableT],
    config: TableConfig,
    source: TableT,
    checksums: ChecksumSettings | None = DEFAULT_CHECKSUMS,
) -> TableComparison:
    """Compare one silver table with its source table (the table's configured columns): by
    checksums of key ranges first (``sources.checksum``; ``checksums`` None: every row), then value
    by value in the ranges that differ."""
    from cdclake.lake.tables import table_exists

    result = TableComparison(table=config.source)
    columns, types = _columns_and_types(config, source)
    if not table_exists(engine.spark, engine.silver_table(config)):
        result.problem = "no silver table"
        return result
    key = list(config.primary_key)
    kinds = {c: kind_of(types[c]) for c in columns}
    first_kind = kinds.get(key[0]) if key else None
    range_column = (key[0], first_kind) if key and first_kind is not None and range_key(first_kind) else None
    ranges: list[KeyRange] | None = None  # None: every row
    frame = engine.spark.table(engine.silver_table(config).identifier)
    if missing := [c for c in columns if c not in frame.columns]:
        result.problem = f"silver lacks column(s) {', '.join(missing)}"
        return result
    unhashable = [f"{c} ({types[c]})" for c in columns if kinds[c] is None]
    hashed = [(c, kinds[c] or "") for c in columns]
    unhashable += [f"{c} ({types[c]}, not exact in the source's SQL)" for c in dialect.inexact(source, hashed)]
    if unhashable:
        result.why_rows = f"no canonical text for {', '.join(unhashable)}: compared value by value"
    elif checksums is not None:
        frame = frame.select(*columns)
        found = search(
            dialect.sums(source, range_column, hashed),
            spark_sums(frame, range_column[0] if range_column else None, hashed),
            spark_boundaries(frame, *range_column) if range_column else (lambda whole, parts: []),
            checksums.split,
            checksums.row_limit,
            checksums.depth if range_column else 1,
        )
        result.method, result.ranges, result.ranges_differing = "checksums", found.ranges, len(found.differing)
        ranges = found.differing
        result.source_rows, result.silver_rows = found.source_rows, found.silver_rows
        if not ranges:
            return result
        if range_column is None:
            ranges = None  # one range, the whole table: every row
    _compare_rows(engine, dialect, config, source, columns, types, result, (range_column, ranges))
    if result.differing_keys:
        result.read_again = (range_column, ranges)
    return result


def _columns_and_types(config: TableConfig, source: SourceTableShape) -> tuple[list[str], dict[str, str]]:
    """The columns compared (the source's, as they are now: a column dropped at the source is not
    compared) and the Spark type each is compared as (the configured one, else the source's)."""
    source_types = {c.name: c.spark_type for c in source.columns}
    columns = list(source_types)
    return columns, {c: config.columns.get(c) or source_types[c] for c in columns}


def compare_again(
    engine: Engine, dialect: SourceDialect[TableT], config: TableConfig, source: TableT, within: Within
) -> TableComparison:
    """Read the rows of ``within`` from both sides again and compare them value by value."""
    columns, types = _columns_and_types(config, source)
    result = TableComparison(table=config.source, method="rows")
    _compare_rows(engine, dialect, config, source, columns, types, result, within)
    return result


def _compare_rows(
    engine: Engine,
    dialect: SourceDialect[TableT],
    config: TableConfig,
    source: TableT,
    columns: Sequence[str],
    types: dict[str, str],
    result: TableComparison,
    within: Within,
) -> None:
    """Read the rows of both sides (those of ``within``'s ranges, or every row) and compare them
    value by value, into ``result``."""
    range_column, ranges = within
    key = list(config.primary_key)
    key_index = [columns.index(k) for k in key]
    null = value_digest(_NULL)
    defaults = {  # column position -> digests of the values the source shows for rows it never logged
        columns.index(c): {value_digest(canonical(v, types[c])) for v in values}
        for c, values in dialect.unlogged_defaults(source, columns, types).items()
    }

    named: dict[bytes, str] = {}  # a keyless row's digest -> its name (``row_name``), for the report

    def digest(rows: Iterable[Sequence[Any]]) -> tuple[int, dict[str, bytes], Counter[bytes]]:
        """Row count, key -> row digest (keyed tables), row digest -> count (append-only tables)."""
        count = 0
        keyed: dict[str, bytes] = {}
        unkeyed: Counter[bytes] = Counter()
        for row in rows:
            count += 1
            values = [canonical(v, types[c]) for v, c in zip(row, columns, strict=True)]
            if key:
                keyed[", ".join(f"{k}={values[i]}" for k, i in zip(key, key_index, strict=True))] = row_digest(values)
            else:
                found = row_digest(values)
                unkeyed[found] += 1
                if found not in named and len(named) < _NAMED_ROWS:
                    named[found] = row_name(columns, values)
        return count, keyed, unkeyed

    def only_unlogged_defaults(source_row: bytes, silver_row: bytes) -> bool:
        """Every differing column is NULL in silver where the source shows a value it never logged."""
        size = _DIGEST_SIZE
        for i in range(len(columns)):
            theirs, ours = source_row[i * size : (i + 1) * size], silver_row[i * size : (i + 1) * size]
            if theirs != ours and not (ours == null and theirs in defaults.get(i, ())):
                return False
        return True

    where = None if range_column is None or ranges is None else spark_condition(range_column[0], ranges)
    silver = _silver_rows(engine, config, columns, types, where)
    silver_rows, silver_digest, silver_multiset = digest(silver)
    source_rows = dialect.rows(source, columns, types, within)
    try:
        read_source, source_digest, source_multiset = digest(source_rows)
    finally:
        source_rows.close()  # ends the reading transaction now, also after a failure
    result.rows_read = silver_rows + read_source
    if ranges is None or range_column is None:
        result.source_rows, result.silver_rows = read_source, silver_rows
    if key:
        result.missing = sorted(set(source_digest) - set(silver_digest))
        result.unexpected = sorted(set(silver_digest) - set(source_digest))
        for k in sorted(k for k in source_digest.keys() & silver_digest.keys() if source_digest[k] != silver_digest[k]):
            if only_unlogged_defaults(source_digest[k], silver_digest[k]):
                result.unlogged_defaults.append(k)
            else:
                result.different.append(k)
                result.differing_columns[k] = differing_columns(columns, source_digest[k], silver_digest[k])
        result.source_digests = {k: source_digest.get(k) for k in result.differing()}
    else:

        def names(rows: Counter[bytes]) -> list[str]:
            return sorted(f"{named.get(h, 'row (not named: too many differ)')} x{n}" for h, n in rows.items())

        result.missing = names(source_multiset - silver_multiset)
        result.unexpected = names(silver_multiset - source_multiset)


@dataclass(frozen=True)
class LiveCheck:
    """Verify against a live source (``sources.live``): how long to wait, and how far silver has applied a
    table (``ops.applied.silver_position``, handed in by the shell)."""

    settings: LiveSettings
    silver_at: Callable[[TableConfig], SilverPosition]
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    # hears what a wait waits for (``sources.live.waiting_text``): logged by default, so the user who
    # sees nothing else for up to --delivery seconds knows why
    tell: Callable[[str], None] = field(default=lambda text: log.info("%s", text))


_READS_AGAIN = 3  # reads of a differing table's ranges at most, while some of its differing source rows move


def verify(
    engine: Engine,
    dialect: SourceDialect[Any],
    tables: Sequence[TableConfig] | None = None,
    checksums: ChecksumSettings | None = DEFAULT_CHECKSUMS,
    live: LiveCheck | None = None,
) -> list[TableComparison]:
    """Compare each configured table (or ``tables``) with the source database behind ``dialect``.

    A table that cannot be compared (no source table, no silver table, a failure while reading
    either side) comes back with ``problem`` set, and the others are still compared. With ``live``,
    a differing table is compared again once silver has caught up with where the source stood when
    it was read, and only the keys that still differ are reported (``_settle``).
    """
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
            return compare_table(engine, dialect, table, source, checksums)

        began = datetime.now(UTC)
        results.append(_guarded(table, compare))
        results[-1].source_at = started
        results[-1].started = began
        results[-1].finished = datetime.now(UTC)
        if live is not None and results[-1].read_again is not None:
            read_at[len(results) - 1] = dialect.position()
    if live is not None:
        deadline = live.clock() + live.settings.wait_seconds
        for index, noted in read_at.items():
            table, first = selected[index], results[index]

            def settle(table: TableConfig = table, first: TableComparison = first, noted: Any = noted) -> Any:
                return _settle(engine, dialect, (table, sources[table.source]), (first, noted), live, deadline)

            first_started = results[index].started
            results[index] = _guarded(table, settle)
            results[index].source_at = started
            results[index].started, results[index].finished = first_started, datetime.now(UTC)
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
    engine: Engine,
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
            kept.lagging = lag_text(waited.silver, noted)
            kept.lag_seconds = lag_seconds(waited.silver, noted)
            break
        again = compare_again(engine, dialect, config, source, first.read_again)
        noted = dialect.position()
        rows_read += again.rows_read
        kept = _both(kept, again)
        moving = [k for k in kept.differing() if again.source_digests.get(k) != previous.source_digests.get(k)]
        if not moving:
            break
        previous = again
    unconfirmed = [] if kept.lagging else moving  # a lagging table keeps its keys, none of them confirmed
    if unconfirmed:
        kept = _without(kept, set(unconfirmed))
        kept.unconfirmed = len(unconfirmed)
        if not kept.differing_keys:
            kept.lagging = (
                f"{len(unconfirmed)} differing key(s) still changing at the source after {_READS_AGAIN} reads"
            )
    kept.lag_resolved = first.differing_keys - kept.differing_keys - len(unconfirmed)
    kept.rows_read = rows_read
    kept.method, kept.why_rows = first.method, first.why_rows
    kept.ranges, kept.ranges_differing = first.ranges, first.ranges_differing
    kept.source_rows, kept.silver_rows = first.source_rows, first.silver_rows
    return kept


def _both(before: TableComparison, again: TableComparison) -> TableComparison:
    """The keys that differ in both comparisons, with ``again``'s differing columns and source rows."""
    kept = TableComparison(table=again.table, read_again=before.read_again)
    kept.missing = persisting(before.missing, again.missing)
    kept.unexpected = persisting(before.unexpected, again.unexpected)
    kept.different = persisting(before.different, again.different)
    kept.unlogged_defaults = persisting(before.unlogged_defaults, again.unlogged_defaults)
    kept.differing_columns = {k: again.differing_columns[k] for k in kept.different}
    kept.source_digests = {k: again.source_digests.get(k) for k in kept.differing()}
    return kept


def _without(comparison: TableComparison, keys: set[str]) -> TableComparison:
    """``comparison`` without ``keys`` (those not confirmed)."""
    kept = TableComparison(table=comparison.table, read_again=comparison.read_again)
    kept.missing = [k for k in comparison.missing if k not in keys]
    kept.unexpected = [k for k in comparison.unexpected if k not in keys]
    kept.different = [k for k in comparison.different if k not in keys]
    kept.unlogged_defaults = [k for k in comparison.unlogged_defaults if k not in keys]
    kept.differing_columns = {k: comparison.differing_columns[k] for k in kept.different}
    kept.source_digests = {k: comparison.source_digests.get(k) for k in kept.differing()}
    return kept


def comparisons_json(results: Sequence[TableComparison]) -> str:
    """Every table's comparison and the summary, as one JSON document."""
    import json

    tables = [r.as_json() for r in results]
    summary = {v: sum(1 for t in tables if t["verdict"] == v) for v in ("equal", "differing", "lagging", "skipped")}
    return json.dumps({"tables": tables, "summary": summary}, indent=2, default=str) + "\n"


def comparisons_text(results: Sequence[TableComparison], style: str, show: int = 20) -> str:
    """``verify``'s output in the ``--format`` every command shares: ``table`` (its lines, see
    ``format_comparisons``), ``csv`` (a row a table: the counts, the keys' lists left to json) or
    ``json`` (one document with every key)."""
    if style == "json":
        return comparisons_json(results)
    if style == "csv":
        from cdclake.shells.output import csv_lines

        columns = ["table", "verdict", "problem", "source_rows", "silver_rows", "method", "how", "ranges"]
        columns += ["ranges_differing", "rows_read", "source_position", "lag_resolved", "unconfirmed", "lagging"]
        columns += ["lag_seconds"]
        counted = ("missing", "unexpected", "different", "default_not_in_silver")
        rows = []
        for result in results:
            values = result.as_json()
            rows.append([values[c] for c in columns] + [len(values[c]) for c in counted])
        return csv_lines([*columns, *counted], rows)
    return format_comparisons(results, show)


def format_comparisons(results: Sequence[TableComparison], show: int = 20) -> str:
    """One line per table, then up to ``show`` differing keys of each kind (a row whose content
    differs with the columns that differ), then one summary line: tables equal, differing, skipped."""
    lines = []
    for r in results:
        if r.problem:
            lines.append(f"SKIPPED {r.table}: {r.problem}")
            continue
        verdict = {"equal": "OK     ", "differing": "DIFFERS", "lagging": "LAGGING"}[r.verdict]
        differ = f"{r.differing_keys} row(s) differ; " if r.differing_keys else ""
        rows = f"source rows={r.source_rows} silver rows={r.silver_rows}"
        lines.append(f"{verdict} {r.table}: {differ}{rows} ({r.how()})")
        if r.lagging:
            lines.append(f"  silver had not caught up with the source ({r.position}) in time: {r.lagging}")
        if r.lag_resolved:
            lines.append(f"  {r.lag_resolved} key(s) differed only until silver caught up (lag, not reported)")
        if r.unconfirmed and not r.lagging:
            lines.append(f"  {r.unconfirmed} more key(s) kept changing at the source: not confirmed, not reported")
        different = [f"{k} (columns: {', '.join(r.differing_columns.get(k, ()))})" for k in r.different]
        for label, keys in (("missing from silver", r.missing), ("not at the source", r.unexpected),
                            ("content differs", different),
                            ("default not in silver (row older than an ADD COLUMN ... DEFAULT, not written since)",
                             r.unlogged_defaults)):  # fmt: skip
            for k in keys[:show]:
                lines.append(f"  {label}: {k}")
            if len(keys) > show:
                lines.append(f"  ... and {len(keys) - show} more {label}")
    count = Counter(r.verdict for r in results)
    lines.append(
        f"verify: {count['equal']} table(s) equal, {count['differing']} differing, "
        + (f"{count['lagging']} lagging, " if count["lagging"] else "")
        + f"{count['skipped']} skipped"
    )
    return "\n".join(lines) + "\n"

"""Checksums by key range: silver compared with its source where the data is, a few kilobytes a table.

Each side reduces each row to one number and each range of keys to two: its row count and the sum
of its rows' numbers. A row's number is the MD5 of its canonical text, its first 15 hexadecimal digits
read as a 60-bit integer. A row's text is its columns' pieces in order: a text column's value with its
length in front (``5:hello``; NULL ``-``), any other column's value with ``,`` after it (``42,``; NULL
``-,``: no value of those kinds holds a comma or is ``-``), so no two rows share a text by accident and
only strings pay for their length. Equal ranges are done. A differing range
is split again at quantiles of silver's keys in it, until it holds at most ``row_limit`` rows on
either side; then only its rows are read from both sides and compared value by value, which names
the differing columns (``verify.rows``). An equal table costs one query a side.

The canonical text of a value is defined once per configured (Spark) type, here, as a *kind*; each
dialect (Spark for silver; ``verify/<engine>/checksums.py`` for PostgreSQL, MariaDB/MySQL and SQL
Server) writes the kind in its own SQL:

=============  ==========================================================================
kind           text
=============  ==========================================================================
text           the string as stored (a source type without text form: its output text)
integer        decimal digits, ``-`` in front when negative
boolean        ``true`` / ``false``
decimal:S      the value rounded to S fraction digits, S digits printed, no exponent
date           ``YYYY-MM-DD``
timestamp      microseconds since 1970-01-01 00:00:00 UTC, decimal digits (a wall-clock value
               without a zone: as if it were UTC)
binary         lower-case hexadecimal
=============  ==========================================================================

``float`` and ``double`` have no kind: their decimal text differs between engines (Java prints
``1.0E20`` where PostgreSQL prints ``1e+20``), so a table with such a column is compared row by
row, and the result says so and names the columns.

Ranges are cut on the first key column when its type orders alike on both sides (integers,
decimals, dates, and strings compared by code point: PostgreSQL's ``COLLATE "C"``, MySQL's UTF-8
bytes, SQL Server's ``BIN2`` collation); a table keyed
otherwise, or append-only, is one range (append-only tables compare as multisets: count and sum).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from cdclake.types import INTEGRAL_TYPES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

T = TypeVar("T")

NULL_TEXT = "-"  # a NULL text's piece: no length in front, so it is no string's piece
END = ","  # ends the piece of a value of any other kind (no such value's text holds it)
NULL_PIECE = NULL_TEXT + END  # a NULL's piece in a column of any other kind (no such value's text is "-")
HASH_DIGITS = 15  # hexadecimal digits of the MD5 a row's number takes (60 bits: a sum of them stays exact)
_HALF_BITS, _HALF_MASK = 30, (1 << 30) - 1  # silver sums a number's halves, each in a bigint
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_RANGE_KEY_KINDS = ("integer", "text", "date", "decimal")
# Java's BigDecimal.toString (Spark's cast to string) writes an exponent only when more than 6 fraction digits
_PLAIN_SCALE = 6


def kind_of(spark_type: str) -> str | None:
    """The canonical text's kind of a configured type; None: compared row by row (floating point)."""
    if spark_type == "string":
        return "text"
    if spark_type in INTEGRAL_TYPES:
        return "integer"
    if spark_type in ("boolean", "date", "binary"):
        return spark_type
    if spark_type in ("timestamp", "timestamp_ntz"):
        return "timestamp"
    if match := _DECIMAL.match(spark_type):
        return f"decimal:{match.group(2)}"
    return None


def range_key(kind: str | None) -> bool:
    """Whether a first key column of this kind orders alike at the source and in silver."""
    return kind is not None and kind.split(":")[0] in _RANGE_KEY_KINDS


@dataclass(frozen=True)
class KeyRange:
    """Keys from ``low`` (inclusive) to ``high`` (exclusive); None: unbounded on that side."""

    low: Any = None
    high: Any = None

    def describe(self) -> str:
        low = "" if self.low is None else repr(self.low)
        high = "" if self.high is None else repr(self.high)
        return f"[{low}, {high})"


@dataclass(frozen=True)
class RangeSum:
    """What one side says of one range: its rows and the sum of their numbers."""

    rows: int
    total: int


EMPTY = RangeSum(0, 0)

# One side's sums for the buckets a range is cut into at ``boundaries``: bucket i holds the keys
# from boundary i-1 (inclusive; the range's low for i = 0) to boundary i (exclusive; its high last).
Sums = Callable[[KeyRange, Sequence[Any]], dict[int, RangeSum]]


@dataclass
class RangeSearch:
    """Where two sides differ, found by checksums: the ranges left to compare row by row."""

    differing: list[KeyRange] = field(default_factory=list)
    ranges: int = 0  # ranges whose checksums were compared
    queries: int = 0  # checksum queries a side ran
    source_rows: int = 0
    silver_rows: int = 0


def search(
    source: Sums,
    silver: Sums,
    boundaries: Callable[[KeyRange, int], list[Any]],
    split: int = 64,
    row_limit: int = 5000,
    depth: int = 4,
) -> RangeSearch:
    """The ranges of keys where ``source`` and ``silver`` differ, each small enough (at most
    ``row_limit`` rows a side) to compare row by row, or not to be cut further (``depth`` levels,
    or silver has no distinct keys left to cut at). ``boundaries(range, n)``: up to ``n - 1``
    increasing keys inside the range (silver's quantiles) to cut it at."""
    found = RangeSearch()

    def visit(whole: KeyRange, level: int) -> None:
        cuts = boundaries(whole, split) if level < depth else []
        with ThreadPoolExecutor(1) as other:  # the source's query runs while Spark computes silver's
            asked = other.submit(source, whole, cuts)
            ours = silver(whole, cuts)
            theirs = asked.result()
        found.queries += 1
        if level == 0:
            found.source_rows = sum(s.rows for s in theirs.values())
            found.silver_rows = sum(s.rows for s in ours.values())
        edges = [whole.low, *cuts, whole.high]
        for bucket in range(len(cuts) + 1):
            found.ranges += 1
            left, right = theirs.get(bucket, EMPTY), ours.get(bucket, EMPTY)
            if left == right:
                continue
            part = KeyRange(edges[bucket], edges[bucket + 1])
            small = max(left.rows, right.rows) <= row_limit
            if small or level + 1 >= depth or not cuts:
                found.differing.append(part)
            else:
                visit(part, level + 1)

    visit(KeyRange(), 0)
    return found


# --- The sources' side: what every dialect's SQL shares ----------------------------------------------------


def where_in_ranges(column: str | None, ranges: Sequence[KeyRange] | None, none: str) -> tuple[str, list[Any]]:
    """A WHERE condition on the key ``column`` (its SQL) for the rows in one of ``ranges``, with its ``%s``
    parameters: "" for every row (no ranges, no key column, or an unbounded range), ``none`` (the dialect's
    false) for no row."""
    if ranges is None or column is None:
        return ("" if ranges is None or ranges else none), []
    conditions, parameters = [], []
    for part in ranges:
        bounds = []
        if part.low is not None:
            bounds.append(f"{column} >= %s")
            parameters.append(part.low)
        if part.high is not None:
            bounds.append(f"{column} < %s")
            parameters.append(part.high)
        if not bounds:
            return "", []
        conditions.append("(" + " AND ".join(bounds) + ")")
    return (" OR ".join(conditions) or none), parameters


@dataclass(frozen=True)
class PieceSql:
    """How a dialect's SQL writes a row's pieces (module docstring): a text's length in characters as text, the
    concatenation of texts, and a string literal."""

    length: Callable[[str], str]
    concat: Callable[[Sequence[str]], str]
    literal: Callable[[str], str]


def row_pieces(
    columns: Sequence[tuple[str, str]], value: Callable[[str, str], str], quote: Callable[[str], str], sql: PieceSql
) -> list[str]:
    """Each column's piece of a row's text in a dialect's SQL (``value(name, kind)``: its canonical text)."""
    parts = []
    for name, kind in columns:
        text = value(name, kind)
        if kind == "text":
            piece, null = sql.concat([sql.length(text), sql.literal(":"), text]), NULL_TEXT
        else:
            piece, null = sql.concat([text, sql.literal(END)]), NULL_PIECE
        parts.append(f"CASE WHEN {quote(name)} IS NULL THEN {sql.literal(null)} ELSE {piece} END")
    return parts


def bucket_search(first: int, last: int, leaf: Callable[[int], T], branch: Callable[[int, T, T], T]) -> T:
    """The bucket of a key among buckets ``first`` to ``last``, found by a balanced search: ``branch(i, below,
    rest)`` is ``below`` when the key is under cut ``i`` (the low end of bucket ``i + 1``), else ``rest``;
    ``leaf(b)`` is bucket ``b``. A key meets log2(buckets) cuts, not one cut per bucket."""
    if first == last:
        return leaf(first)
    middle = (first + last + 1) // 2
    return branch(middle - 1, bucket_search(first, middle - 1, leaf, branch), bucket_search(middle, last, leaf, branch))


def bucket_of(column: str | None, cuts: Sequence[Any]) -> tuple[str, list[Any]]:
    """The bucket of a row by its key ``column`` (SQL) among ``cuts`` (0 below the first), with the cuts as
    ``%s`` parameters in the order the SQL names them."""
    if column is None or not cuts:
        return "0", []

    def branch(cut: int, below: tuple[str, list[Any]], rest: tuple[str, list[Any]]) -> tuple[str, list[Any]]:
        return f"CASE WHEN {column} < %s THEN {below[0]} ELSE {rest[0]} END", [cuts[cut], *below[1], *rest[1]]

    return bucket_search(0, len(cuts), lambda bucket: (str(bucket), []), branch)


# --- Spark: silver's side ---------------------------------------------------------------------------


def spark_text(column: Column, kind: str) -> Column:
    """A column's canonical text in Spark SQL."""
    from pyspark.sql import functions as F

    if kind == "text":
        return column
    if kind == "integer":
        return column.cast("string")
    if kind == "boolean":
        return F.when(column, F.lit("true")).otherwise(F.lit("false"))
    if kind.startswith("decimal:"):
        scale = int(kind.split(":")[1])
        if scale <= _PLAIN_SCALE:  # a cast prints plain digits at this scale, and is the cheapest way
            return column.cast(f"decimal(38,{scale})").cast("string")
        # Plain digits (a cast to string prints 0E-10): grouped by format_number, the commas taken out.
        return F.regexp_replace(F.format_number(column, scale), ",", "")
    if kind == "date":
        return F.date_format(column, "yyyy-MM-dd")
    if kind == "timestamp":  # a number, not formatted text: formatting was the dearest part of a row's text
        return F.unix_micros(column.cast("timestamp")).cast("string")  # the session's zone is UTC
    if kind == "binary":
        return F.lower(F.hex(column))
    raise ValueError(f"no canonical text for kind {kind}")


def spark_row_number(columns: Sequence[tuple[str, str]]) -> Column:
    """A row's number in Spark SQL, over ``columns`` as (name, kind): a bigint of 60 bits."""
    from pyspark.sql import functions as F

    # One flat concat of small parts, each NULL-safe on its own (``-``, or ``-`` and ``,``, for a NULL): Spark
    # builds the row's text once, where a concat per piece built each piece first.
    parts = []
    for name, kind in columns:
        text, null = spark_text(F.col(name), kind), F.col(name).isNull()
        if kind == "text":
            length = F.length(text).cast("string")
            parts += [F.when(null, F.lit(NULL_TEXT)).otherwise(length), F.when(null, F.lit("")).otherwise(F.lit(":"))]
            parts.append(F.when(null, F.lit("")).otherwise(text))
        else:
            parts += [F.when(null, F.lit(NULL_TEXT)).otherwise(text), F.lit(END)]
    digest = F.md5(F.concat(*parts).cast("binary"))
    return F.conv(F.substring(digest, 1, HASH_DIGITS), 16, 10).cast("bigint")


def spark_range(frame: DataFrame, key: str, whole: KeyRange) -> DataFrame:
    """``frame``'s rows whose ``key`` lies in ``whole``."""
    condition = spark_condition(key, [whole])
    return frame if condition is None else frame.where(condition)


def spark_condition(key: str, ranges: Sequence[KeyRange]) -> Column | None:
    """Whether ``key`` lies in one of ``ranges`` (None: no bound at all)."""
    from functools import reduce

    from pyspark.sql import functions as F

    conditions = []
    for whole in ranges:
        bounds = []
        if whole.low is not None:
            bounds.append(F.col(key) >= F.lit(whole.low))
        if whole.high is not None:
            bounds.append(F.col(key) < F.lit(whole.high))
        if not bounds:
            return None
        conditions.append(reduce(lambda a, b: a & b, bounds))
    return reduce(lambda a, b: a | b, conditions) if conditions else F.lit(False)


def spark_sums(frame: DataFrame, key: str | None, columns: Sequence[tuple[str, str]]) -> Sums:
    """Silver's ``Sums`` over ``frame`` (``key`` None: the whole table is one range)."""
    from pyspark.sql import functions as F

    def sums(whole: KeyRange, cuts: Sequence[Any]) -> dict[int, RangeSum]:
        rows = frame if key is None else spark_range(frame, key, whole)
        bucket = bucket_search(
            0,
            len(cuts),
            lambda index: F.lit(index),
            lambda cut, below, rest: F.when(F.col(key) < F.lit(cuts[cut]), below).otherwise(rest),  # type: ignore[arg-type]
        )
        grouped = rows.select(bucket.alias("bucket"), spark_row_number(columns).alias("number")).groupBy("bucket")
        # Two exact bigint sums of a number's high and low 30 bits (exact up to 2^33 rows a range): cheaper
        # than one sum of decimals, added up in Python.
        high, low = F.shiftright("number", _HALF_BITS), F.col("number").bitwiseAND(_HALF_MASK)
        found = grouped.agg(F.count(F.lit(1)).alias("rows"), F.sum(high).alias("high"), F.sum(low).alias("low"))
        return {
            int(r["bucket"]): RangeSum(int(r["rows"]), (int(r["high"] or 0) << _HALF_BITS) + int(r["low"] or 0))
            for r in found.collect()
        }

    return sums


def spark_boundaries(frame: DataFrame, key: str, kind: str) -> Callable[[KeyRange, int], list[Any]]:
    """Cut points inside a range: silver's key quantiles (approximate for numbers and dates, the
    first key of each of n equal tiles for strings), distinct and increasing."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    def cuts(whole: KeyRange, parts: int) -> list[Any]:
        rows = spark_range(frame, key, whole).select(key)
        if kind == "integer":
            # Equal widths between the range's ends: no quantile to compute, and silver's smallest
            # and largest keys come from its metadata (Iceberg answers min/max without a scan).
            low, high = whole.low, whole.high
            if low is None or high is None:
                row = rows.agg(F.min(key), F.max(key)).first()
                if row is None or row[0] is None:
                    return []
                low = row[0] if low is None else low
                high = row[1] + 1 if high is None else high
            step = (high - low) / parts
            found = [low + int(step * i) for i in range(1, parts)]
        elif kind == "text":
            tiles = rows.withColumn("_tile", F.ntile(parts).over(Window.orderBy(key)))
            found = [r[1] for r in tiles.groupBy("_tile").agg(F.min(key)).orderBy("_tile").collect()][1:]
        else:
            fractions = [i / parts for i in range(1, parts)]
            row = rows.agg(F.percentile_approx(key, fractions, 10_000)).first()
            found = list(row[0] or []) if row is not None else []
        inside = [v for v in found if (whole.low is None or v > whole.low) and (whole.high is None or v < whole.high)]
        return sorted(set(inside))

    return cuts

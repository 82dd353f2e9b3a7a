"""The pure core of the engine: raw DMS rows -> typed, validated, cleaned changes (their commit
instants: ``commit_instants``; the latest per key and its effect: ``effects``).

Every function here is ``DataFrame -> DataFrame`` with its parameters passed in; none reads or
writes anything. Bookkeeping columns all start with ``_cdc_`` and never reach silver.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, NamedTuple

from cdclake.columns import (
    BOOKKEEPING,
    CHANGE_SEQ,
    COMMIT_TS,
    CORRUPT_RECORD,
    ERROR,
    FILE_INDEX,
    INVALID,
    OP,
    RAW_LINE,
    SILVER_ORDER,
    UNCHANGED_PREFIX,
)
from cdclake.config import BronzeSettings, CleaningRules, TableConfig
from cdclake.dms.layout import DMS_OP_COLUMN
from cdclake.engine.commit_instants import DMS_TS_TEXT, commit_instant_parts, instant_of_parts
from cdclake.errors import ConfigError
from cdclake.identifiers import quote, sql_string
from cdclake.types import NUMERIC_TYPES, TIMESTAMP_TYPES, fraction_digits

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_TS_WIDTH, _SEQ_WIDTH = 32, 48
VALID_OPS = ("I", "U", "D")
UNKNOWN_OP = "unknown Op '%s'"


def data_columns(df: DataFrame) -> list[str]:
    """The columns of ``df`` that describe the source row (everything but bookkeeping)."""
    return [c for c in df.columns if c not in BOOKKEEPING and c != SILVER_ORDER and not c.startswith(UNCHANGED_PREFIX)]


class _Reason(NamedTuple):
    """Why a row cannot be applied: SQL text of the condition and of the reason's words."""

    when: str
    text: str

    @property
    def sql(self) -> str:
        """SQL text: the reason where the condition holds, else NULL (an error array's entry)."""
        return f"CASE WHEN {self.when} THEN {self.text} END"


def _with_reasons(df: DataFrame, reasons: Sequence[_Reason], values: dict[str, Column] | None = None) -> DataFrame:
    """Append ``reasons`` to the row's error array, and to ``_cdc_invalid`` where ``df`` has it;
    ``values``: columns set in the same projection.

    The error and the flag columns are each referenced once, so expressions stay linear when Spark
    collapses the projections of many columns (twice would double the expression with every column).
    """
    from pyspark.sql import functions as F

    updates = dict(values or {})
    if reasons:
        updates[ERROR] = F.expr(f"concat({quote(ERROR)}, {_error_array(reasons)})")
        if INVALID in df.columns:
            updates[INVALID] = F.expr(f"{quote(INVALID)} OR {_any_reason(reasons)}")
    return df.withColumns(updates) if updates else df


def _error_array(reasons: Sequence[_Reason]) -> str:
    """SQL text: the array of ``reasons``, NULL where they do not hold."""
    return f"array({', '.join(r.sql for r in reasons)})"


def _any_reason(reasons: Sequence[_Reason]) -> str:
    """SQL text: whether any of ``reasons`` holds, from their conditions alone. Without the
    reasons' words (excerpts of the value, formatted) the check's generated code stays small
    enough for the JIT to compile it: a full load's check took 2-3 times its scan when it did not."""
    return f"coalesce({', '.join(f'CASE WHEN {r.when} THEN true END' for r in reasons)}, false)"


def has_error(df: DataFrame | None = None) -> Column:
    """True for rows with at least one error (``df``: the rows, when the caller needs only this
    and not the reasons: its ``_cdc_invalid`` flag is read, and Spark then builds no error array)."""
    from pyspark.sql import functions as F

    if df is not None and INVALID in df.columns:
        return F.col(INVALID)
    # Joining skips the NULL entries and no reason is empty; unlike a lambda over the array,
    # this compiles into Spark's generated code.
    return F.array_join(F.col(ERROR), "") != ""


def error_text() -> Column:
    """The row's errors as one text (NULL entries skipped)."""
    from pyspark.sql import functions as F

    return F.concat_ws("; ", F.col(ERROR))


def _sql_reason(template: str, value: str) -> str:
    """SQL text of ``template`` (its ``%s`` in the words of a reason) with ``value``'s excerpt."""
    parts = template.split("%s")
    return f"format_string({sql_string('%s'.join(p.replace('%', '%%') for p in parts))}, {_excerpt(value)})"


def _excerpt(value: str, length: int = 40) -> str:
    """SQL text: a value short enough to quote in an error message."""
    text = f"CAST({value} AS STRING)"
    return f"CASE WHEN length({text}) > {length} THEN concat(substring({text}, 1, {length}), '...') ELSE {text} END"


def _checked_casts(df: DataFrame, casts: dict[str, str], rounded: Collection[str] = ()) -> DataFrame:
    """Cast columns; a non-NULL value that does not convert is an error, never a silent NULL.

    Neither is a value an integer or decimal type cannot store exactly (``2.7`` as ``int``,
    ``12.345`` as ``decimal(10,2)``), unless its column is in ``rounded``: those are rounded half
    up to the type's scale. One projection for all columns and one append to the error array (an
    append per column would copy the array once per column, on every row). Each cast is
    evaluated once: in a projection of its own, whose result the checks read (``_typed``).
    """
    from pyspark.sql import functions as F

    if not casts:
        return df
    sources = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    values = {_typed(c): F.expr(_cast_value(quote(c), sources[c], t, c in rounded)) for c, t in casts.items()}
    df = df.withColumns(values)
    checked = {quote(c): (c, sources[c], t) for c, t in casts.items()}
    reasons = _cast_reasons(checked, rounded, {quote(c): quote(_typed(c)) for c in casts})
    typed = {c: F.col(quote(_typed(c))) for c in casts}
    return _with_reasons(df, reasons, typed).drop(*[_typed(c) for c in casts])


_TYPED_PREFIX = "_cdc_typed_"
_TS_PARTS = "_cdc_ts_parts"  # ``commit_instant_parts`` of the row's commit timestamp


def _typed(column: str) -> str:
    """The name under which a column's cast value is computed before its checks read it.

    The cast sits in a projection of its own and the checks reference its result, so Spark
    keeps the two apart (CollapseProject inlines no costly expression used twice) and casts
    each value once per row. Inlined into the check, the cast would be evaluated again: Spark's
    common-subexpression elimination skips what only a condition's later branch evaluates."""
    return _TYPED_PREFIX + column


def _cast_reasons(
    casts: dict[str, tuple[str, str, str]], rounded: Collection[str], typed: dict[str, str] | None = None
) -> list[_Reason]:
    """SQL text of why a value cannot be cast: ``casts`` maps the SQL text of each value to its
    column's name, its Spark type now and the type it is cast to; ``typed``: the SQL text of a
    value's plain cast, where it is already computed (columns in ``rounded`` are cast again: their
    value is the rounded one)."""
    reasons = []
    for value, (column, _, type_name) in casts.items():
        cast = _plain_cast(value, column, type_name, rounded, typed)
        invalid = _sql_reason(f"value '%s' of column {column} is not a valid {type_name}", value)
        reasons.append(_Reason(f"{value} IS NOT NULL AND {cast} IS NULL", invalid))
    for value, (column, source, type_name) in casts.items():
        scale = fraction_digits(type_name)
        if scale is not None and column not in rounded:
            lossy = _loses_digits(value, source, _plain_cast(value, column, type_name, rounded, typed), scale)
            reason = f"value '%s' of column {column} cannot be stored exactly as {type_name} (clean.round rounds it)"
            reasons.append(_Reason(lossy, _sql_reason(reason, value)))
    return reasons


def _plain_cast(value: str, column: str, type_name: str, rounded: Collection[str], typed: dict[str, str] | None) -> str:
    """SQL text of ``value`` cast to ``type_name``: its computed cast where ``typed`` has it."""
    if typed and value in typed and column not in rounded:
        return typed[value]
    return f"CAST({value} AS {type_name})"


def _cast_value(value: str, source: str, type_name: str, rounded: bool) -> str:
    """SQL text of ``value`` cast to ``type_name`` (rounded half up when ``rounded``)."""
    return _rounded(value, source, type_name) if rounded else f"CAST({value} AS {type_name})"


def _loses_digits(value: str, source: str, cast: str, scale: int) -> str:
    """SQL text: whether ``cast``, the SQL text of ``value`` (of Spark type ``source``) cast to an
    integer or decimal type, drops digits: Spark's cast truncates text into integers, rounds into
    decimals and wraps numbers that overflow an integer, all silently."""
    if source == "string":
        # A nonzero digit after the first ``scale`` fraction digits (plain notation, as DMS writes).
        # Matched only where more than ``scale`` characters follow a '.': integers as DMS writes
        # them, and decimals within their scale, skip the regular expression. (Those questions
        # are asked of the value as it is: trimming removes only spaces, so a '.' or an exponent
        # is there either way, and spaces only add to the characters after the '.'.)
        digits = sql_string(rf"^[+-]?[0-9]*\.[0-9]{{{scale}}}[0-9]*[1-9][0-9]*$")
        point = f"instr({value}, '.')"
        plain = f"contains({value}, '.') AND length({value}) - {point} > {scale} AND trim({value}) RLIKE {digits}"
        exponent = f"(contains({value}, 'e') OR contains({value}, 'E'))"
        scientific = f"{exponent} AND CAST({cast} AS DOUBLE) != CAST({value} AS DOUBLE)"
        return f"coalesce(({plain}) OR ({scientific}), false)"
    if source.startswith(NUMERIC_TYPES):
        return f"coalesce({cast} != {value}, false)"
    return "false"


def _rounded(value: str, source: str, type_name: str) -> str:
    """SQL text of ``value`` rounded half up into the integer or decimal ``type_name`` (a decimal
    cast rounds half up by itself; an integer cast would truncate)."""
    if fraction_digits(type_name) != 0:
        return f"CAST({value} AS {type_name})"
    exact = f"CAST({value} AS DECIMAL(38,18))" if source == "string" else value
    return f"CAST(round({exact}, 0) AS {type_name})"


def _row_reasons(
    raw: DataFrame, op: str, ts_name: str | None, ts_text: str, decoded: bool, full_load: bool
) -> list[_Reason]:
    """Why a raw row cannot be applied, before its values' casts: a wrong number of fields, an
    unknown operation, text that was not UTF-8 (``decoded``: CSV text Spark decoded), a commit
    timestamp that does not parse or (CDC rows) is missing."""
    reasons = [
        _Reason(f"{quote(CORRUPT_RECORD)} IS NOT NULL", "'wrong number of fields'"),
        _Reason(f"NOT coalesce(({op}) IN {VALID_OPS!r}, false)", _sql_reason(UNKNOWN_OP, op)),
    ]
    text = [f.name for f in raw.schema.fields if f.dataType.simpleString() == "string" and f.name != CORRUPT_RECORD]
    if text and decoded:
        # Spark decodes CSV bytes that are not UTF-8 as U+FFFD instead of failing; say so per row.
        # One byte search of the row's text (NULLs skipped; decoded text is valid UTF-8, so U+FFFD
        # cannot straddle two values): ``instr`` counts characters as it goes, several times slower,
        # and a search per column makes the generated code too big for the JIT (``hugeMethodLimit``).
        replaced = f"contains(concat_ws('', {', '.join(quote(c) for c in text)}), '\ufffd')"
        reasons.insert(1, _Reason(replaced, "'bytes that are not valid UTF-8'"))
    if ts_name:
        invalid = f"value '%s' of column {ts_name} is not a valid commit timestamp"
        reasons.append(_Reason(f"{ts_text} IS NOT NULL AND {COMMIT_TS} IS NULL", _sql_reason(invalid, ts_text)))
        if not full_load:
            missing = sql_string(f"commit timestamp column {ts_name} is NULL")
            reasons.append(_Reason(f"{ts_text} IS NULL", missing))
    return reasons


def to_changes(
    raw: DataFrame, settings: BronzeSettings, table: TableConfig, full_load: bool = False, csv: bool | None = None
) -> DataFrame:
    """Raw file rows -> change rows.

    In: the reader's columns (the DMS ``Op`` column when present). Out: the data columns, typed
    as ``table.columns`` declares, plus ``_cdc_op`` (I/U/D; full-load rows without ``Op`` are
    inserts), ``_cdc_ts`` (the commit instant as UTC text, ``commit_instant``), ``_cdc_seq``
    (change sequence text),
    ``_cdc_file``, ``_cdc_row``, ``_cdc_error`` (NULL, or why the row cannot be applied) and
    ``_cdc_invalid`` (whether it has an error: ``has_error``).
    The timestamp column stays a data column (as in the demo's silver table); the change
    sequence does not. A commit timestamp that does not parse is an error, and so is a NULL one
    on a CDC row (``full_load`` False): either would order the change before every stored row.
    ``csv``: whether rows were read from CSV files (default: ``settings.format`` says so), whose
    text Spark decoded: bytes that are not UTF-8 are an error there. Parquet text is not decoded.
    """
    columns = set(raw.columns)
    op = f"upper(trim({quote(DMS_OP_COLUMN)}))" if DMS_OP_COLUMN in columns else "'I'"
    ts_name, seq_name = settings.timestamp_column, settings.change_sequence_column
    ts_text = f"CAST({quote(ts_name)} AS STRING)" if ts_name in columns else "CAST(NULL AS STRING)"
    decoded = settings.format == "csv" if csv is None else csv
    reasons = _row_reasons(raw, op, ts_name, ts_text, decoded, full_load)
    sources = {f.name: f.dataType.simpleString() for f in raw.schema.fields}
    # A column already of its declared type (Parquet) has nothing to convert and nothing to check.
    typed = {c: t for c, t in table.columns.items() if c in columns and c != seq_name and sources[c] != t}
    casts = {c: _cast_value(quote(c), sources[c], t, c in table.clean.round) for c, t in typed.items()}
    checked = {quote(c): (c, sources[c], t) for c, t in typed.items()}
    reasons += _cast_reasons(checked, table.clean.round, {quote(c): quote(_typed(c)) for c in typed})
    projection = _change_projection(raw.columns, typed, op, seq_name, reasons)
    # The instant and the casts in projections of their own: their checks and their values read
    # them, so Spark keeps the projections apart (CollapseProject inlines no costly expression
    # used twice) and evaluates, and analyses, each parse and cast once per row instead of twice.
    # The instant's parts likewise: the instant reads them several times.
    if ts_name and sources.get(ts_name) in TIMESTAMP_TYPES:
        # Already a timestamp (Parquet): its text in the normalised form, nothing to parse. The
        # session's time zone is UTC (``runtime.session``), as for the text cast it replaces.
        parts, instant = "CAST(NULL AS STRING)", f"date_format({quote(ts_name)}, {DMS_TS_TEXT})"
    else:
        parts, instant = commit_instant_parts(ts_text), instant_of_parts(_TS_PARTS)
    computed = [f"{parts} AS {_TS_PARTS}", *[f"{cast} AS {quote(_typed(c))}" for c, cast in casts.items()]]
    df = raw.selectExpr("*", *computed).selectExpr("*", f"{instant} AS {COMMIT_TS}").selectExpr(*projection)
    if settings.csv_no_sup_value is not None:
        df = _mark_unchanged(df, settings.csv_no_sup_value, exclude={ts_name or "", *table.primary_key})
    return df


def _change_projection(
    columns: Sequence[str], typed: Collection[str], op: str, seq_name: str | None, reasons: Sequence[_Reason]
) -> list[str]:
    """``to_changes``'s last projection, as SQL text: the data columns (the typed ones from their
    cast), the raw line of a corrupt record, then ``_cdc_op``, ``_cdc_ts``, ``_cdc_seq``, the errors
    and whether there is one. Every expression is SQL text, so building it costs a few calls into
    Spark per table rather than one per function of every column's checks."""
    dropped = {c for c in (DMS_OP_COLUMN, seq_name) if c}
    projection = []
    for column in columns:
        if column in dropped:
            continue
        if column == CORRUPT_RECORD:
            projection.append(f"{quote(column)} AS {quote(RAW_LINE)}")
        elif column in typed:
            projection.append(f"{quote(_typed(column))} AS {quote(column)}")
        else:
            projection.append(quote(column))
    seq = f"CAST({quote(seq_name)} AS STRING)" if seq_name and seq_name in columns else "CAST(NULL AS STRING)"
    return [
        *projection,
        f"{op} AS {OP}",
        COMMIT_TS,
        f"{seq} AS {CHANGE_SEQ}",
        f"{_error_array(reasons)} AS {ERROR}",
        f"{_any_reason(reasons)} AS {INVALID}",
    ]


def _mark_unchanged(df: DataFrame, marker: str, exclude: set[str]) -> DataFrame:
    """DMS writes CsvNoSupValue for a column an update did not capture (e.g. a LOB): "unchanged".

    The value becomes NULL and ``_cdc_unchanged_<column>`` records that it must not overwrite
    the stored value. Only text columns can hold the marker.
    """
    from pyspark.sql import functions as F

    text_columns = [f.name for f in df.schema.fields if f.dataType.simpleString() == "string"]
    marked = [c for c in data_columns(df) if c not in exclude and c in text_columns]
    unchanged = {UNCHANGED_PREFIX + c: F.expr(f"coalesce({quote(c)} = {sql_string(marker)}, false)") for c in marked}
    values = {c: F.expr(f"CASE WHEN {quote(c)} = {sql_string(marker)} THEN NULL ELSE {quote(c)} END") for c in marked}
    return df.withColumns({**unchanged, **values}) if marked else df


def unchanged_flags(df: DataFrame) -> dict[str, str]:
    """Data column -> its ``_cdc_unchanged_`` flag column, for columns that can be "not captured"."""
    return {c[len(UNCHANGED_PREFIX) :]: c for c in df.columns if c.startswith(UNCHANGED_PREFIX)}


def apply_cleaning(df: DataFrame, rules: CleaningRules, table_name: str) -> DataFrame:
    """Apply the declared cleaning in order: cast, derive, rename, drop (bookkeeping untouched).

    A cast that fails on a non-NULL value marks the row with an error. A rule naming a column
    the data does not have is a configuration error.
    """
    from pyspark.sql import functions as F

    def require(column: str, rule: str) -> None:
        if column not in df.columns:
            raise ConfigError(
                f"Table {table_name}: the {rule} rule names column '{column}', which the data does not have "
                f"(columns: {', '.join(data_columns(df))})."
            )

    for column in rules.cast:
        require(column, "cast")
    df = _checked_casts(df, dict(rules.cast), rules.round)
    for column, expression in rules.derive.items():
        try:
            df = df.withColumn(column, F.expr(expression))
        except Exception as exc:  # AnalysisException / ParseException: report the bad expression
            raise ConfigError(
                f"Table {table_name}: the derived column '{column}' has an invalid expression "
                f"'{expression}': {str(exc).splitlines()[0]}"
            ) from None
    for old, new in rules.rename.items():
        require(old, "rename")
        df = df.withColumnRenamed(old, new).withColumnRenamed(UNCHANGED_PREFIX + old, UNCHANGED_PREFIX + new)
    for column in rules.drop:
        require(column, "drop")
    return df.drop(*rules.drop, *[UNCHANGED_PREFIX + c for c in rules.drop])


def flag_missing_keys(df: DataFrame, key: Sequence[str]) -> DataFrame:
    """Mark rows whose primary key has a NULL part: they cannot be matched to a silver row."""
    reasons = [_Reason(f"{quote(c)} IS NULL", sql_string(f"primary key column {c} is NULL")) for c in key]
    return _with_reasons(df, reasons)


def with_silver_order(changes: DataFrame, file_positions: dict[int, str], full_load: bool) -> DataFrame:
    """Add ``_cdc_order``: commit time, change sequence and file position as one sortable text.

    Full-load rows order before every CDC change whatever their timestamp: CDC changes carry
    whole after-images, so replaying every change captured during the load over it converges,
    whichever way the full-load/CDC overlap falls. Their order is the empty text, below every
    change's (which is never empty), and costs nothing to store.
    """
    from pyspark.sql import functions as F

    if full_load:
        return changes.withColumn(SILVER_ORDER, F.lit(""))
    if file_positions:
        mapping = F.create_map(*[x for o, p in file_positions.items() for x in (F.lit(o), F.lit(p))])
        position = F.element_at(mapping, F.col(FILE_INDEX))
    else:
        position = F.lit("")
    # COMMIT_TS is the commit instant normalised to DMS's default text (``commit_instant``): the
    # order keys silver already holds were built from that text as DMS writes it by default, so
    # they compare with new ones unchanged and no table needs rewriting. (A key stored from an
    # ISO-8601 ``T`` text before the normalisation sorts after its day's other changes; a reload
    # rebuilds it.) NULL only where the row is an error (CDC) or a full-load row, which orders first.
    ts = F.coalesce(F.col(COMMIT_TS), F.lit(""))
    seq = F.coalesce(F.col(CHANGE_SEQ), F.lit(""))
    order = F.concat(F.rpad(ts, _TS_WIDTH, " "), F.lpad(seq, _SEQ_WIDTH, "0"), position)
    return changes.withColumn(SILVER_ORDER, order)


def silver_shape(rows: DataFrame) -> DataFrame:
    """The columns a silver table stores: the data columns and, for keyed tables, ``_cdc_order``."""
    return rows.select(*data_columns(rows), *([SILVER_ORDER] if SILVER_ORDER in rows.columns else []))

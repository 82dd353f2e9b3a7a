"""A DMS commit timestamp, in any form DMS writes it, as the instant it names: SQL text builders (pure).

DMS's default form is ``yyyy-MM-dd HH:mm:ss.SSSSSS`` (UTC); it also writes ISO-8601 with ``T``, ``Z``
or an offset, up to nanoseconds. ``engine.changes`` types every change's commit time with these.
"""

from __future__ import annotations

from cdclake.identifiers import sql_string

# The commit timestamp forms DMS writes: its default ``yyyy-MM-dd HH:mm:ss.SSSSSS`` (UTC) and
# ISO-8601 with ``T``, ``Z`` or an offset; up to nanoseconds.
# DMS's default timestamp text, the form ``commit_instant`` normalises every other form to: its
# date-time pattern and a regular expression that matches it alone.
DMS_TS_TEXT = sql_string("yyyy-MM-dd HH:mm:ss.SSSSSS")
_DMS_TS = sql_string(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}$")
_COMMIT_TS_PATTERN = (
    r"^\s*(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?\s*(Z|[+-]\d{2}(?::?\d{2})?)?\s*$"
)


def commit_instant(text: str) -> str:
    """SQL text: a commit timestamp's text (SQL ``text``) -> the instant it names, as UTC text
    ``yyyy-MM-dd HH:mm:ss.SSSSSS`` (more fraction digits kept when written); NULL when it is no
    timestamp or names no real day.

    Text in that one form sorts as the instants do, whatever form DMS wrote. It is also DMS's own
    default form, so the order keys of rows stored before timestamps were normalised (built from
    that text as written) stay comparable with new ones. Text without a zone is UTC, as DMS writes
    it. The parse does not depend on the session's time zone (timestamps without a zone).
    ``to_changes`` computes it in two projections: ``commit_instant_parts``, then ``instant_of_parts``.
    """
    return instant_of_parts(f"({commit_instant_parts(text)})")


def commit_instant_parts(text: str) -> str:
    """SQL text: a commit timestamp's text -> the text itself when it is in DMS's default form
    (nearly every row: already the instant's text); for the other forms, the parts of the match,
    as "date time|fraction|zone|"; NULL when it is no timestamp (``instant_of_parts`` reads it).

    One regular expression evaluation for all the parts (no part holds a '|'; what a final line
    terminator leaves after the match follows the last '|'): a regexp_extract per part made the
    generated code of a CSV load's typing and checks too big for the JIT (``hugeMethodLimit``)."""
    pattern = sql_string(_COMMIT_TS_PATTERN)
    # DMS's own form: one match that fixes every digit's place, then Spark's cast parser refuses
    # days and times that do not exist.
    canonical = f"coalesce({text} RLIKE {_DMS_TS} AND CAST({text} AS TIMESTAMP_NTZ) IS NOT NULL, false)"
    text_ok = f"coalesce({text} RLIKE {pattern}, false)"
    parts = f"regexp_replace({text}, {pattern}, '$1 $2|$3|$4|')"
    return f"CASE WHEN {canonical} THEN {text} WHEN {text_ok} THEN {parts} END"


def instant_of_parts(parts: str) -> str:
    """SQL text: ``commit_instant_parts``'s result (SQL ``parts``) -> the instant as UTC text."""

    def part(index: int) -> str:  # 1: "date time", 2: fraction digits, 3: zone
        first = f"substring_index({parts}, '|', {index})"
        return first if index == 1 else f"substring_index({first}, '|', -1)"

    zone, digits = part(3), f"translate({part(3)}, 'Z+-:', '')"  # "Z", "+02:00" -> "0200", "-05" -> "05"
    hours, rest = f"CAST(substring({digits}, 1, 2) AS INT)", f"CAST(substring({digits}, 3, 2) AS INT)"
    minutes = f"coalesce({hours} * 60 + coalesce({rest}, 0), 0)"
    offset = f"CASE WHEN {zone} LIKE '-%' THEN -({minutes}) ELSE {minutes} END"
    local = f"to_timestamp_ntz({part(1)}, 'yyyy-MM-dd HH:mm:ss')"
    utc = f"({local} - make_dt_interval(0, 0, {offset}, 0))"
    fraction = f"CASE WHEN length({part(2)}) > 6 THEN {part(2)} ELSE rpad({part(2)}, 6, '0') END"
    general = f"concat(date_format({utc}, 'yyyy-MM-dd HH:mm:ss'), '.', {fraction})"
    # DMS's default form has no '|': it is the instant's text already.
    return f"CASE WHEN NOT contains({parts}, '|') THEN {parts} ELSE {general} END"

"""``cdclake verify`` by checksums of key ranges against a real PostgreSQL: an equal table reads no row,
and each planted difference is found, by key, with its columns, after reading only the ranges that hold it."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from hashlib import md5
from uuid import UUID

from conftest import SourceDatabase, loaded_engine
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cdclake.context import Engine
from cdclake.verify.applied import silver_position
from cdclake.verify.checksum import spark_text
from cdclake.verify.live import LiveSettings
from cdclake.verify.postgres.checksums import SQL
from cdclake.verify.postgres.dialect import PostgresDialect, verify
from cdclake.verify.report import comparisons_json, format_comparisons
from cdclake.verify.result import TableComparison
from cdclake.verify.run import LiveCheck
from cdclake.verify.run import verify as verify_with

SCHEMA = """
CREATE TABLE items (
    id int PRIMARY KEY, name text, price numeric(12,2), due date, at timestamptz, data bytea, flag boolean,
    note text, small smallint, big bigint
);
INSERT INTO items
SELECT i, 'item ' || i, (i * 1.25)::numeric(12,2), date '2024-01-01' + i,
       timestamptz '2024-01-01 00:00:00+00' + i * interval '1 second 7 microseconds',
       decode(lpad(to_hex(i), 8, '0'), 'hex'), i % 2 = 0, CASE WHEN i % 3 = 0 THEN NULL ELSE 'n' || i END,
       i % 100, i * 1000000000::bigint
FROM generate_series(1, 3000) AS i;
CREATE TABLE codes (code text PRIMARY KEY, label text);
INSERT INTO codes
SELECT chr(65 + i % 26) || chr(97 + i % 7) || i || CASE WHEN i % 5 = 0 THEN 'é' ELSE '' END, 'label ' || i
FROM generate_series(1, 500) AS i;
CREATE TABLE events (what text, at date);
INSERT INTO events SELECT 'event ' || (i % 10), date '2024-02-01' + i % 3 FROM generate_series(1, 200) AS i;
CREATE TABLE measures (id int PRIMARY KEY, ratio double precision);
INSERT INTO measures SELECT i, i / 3.0 FROM generate_series(1, 50) AS i;
CREATE TABLE tags (id uuid PRIMARY KEY, "share%" text);
INSERT INTO tags SELECT md5(i::text)::uuid, i || '%' FROM generate_series(1, 400) AS i;
"""


def test_equal_tables_are_proved_by_checksums_and_every_planted_difference_is_named(
    source_db: SourceDatabase, make_engine: Callable[..., Engine]
) -> None:
    # GIVEN five tables captured and applied: integer, text (with non-ASCII keys), uuid (a key with no collation,
    # a column named with the drivers' %) and no key, and one with a double
    engine = loaded_engine(source_db, make_engine, SCHEMA)
    conn = source_db.connect()
    try:
        before = {r.table: r for r in verify(engine, conn)}
    finally:
        conn.close()
    # THEN each is equal; the keyed and keyless ones by checksums alone: no row read from either side
    assert all(r.equal for r in before.values()), {t: r.as_json() for t, r in before.items()}
    for table in ("public.items", "public.codes", "public.events", "public.tags"):
        assert before[table].method == "checksums" and before[table].rows_read == 0, before[table].as_json()
        assert before[table].ranges_differing == 0
    assert before["public.items"].ranges > 1 and before["public.items"].source_rows == 3000
    assert (
        before["public.codes"].ranges > 1 and before["public.events"].ranges == 1 and before["public.tags"].ranges > 1
    )
    # AND the double column is compared value by value, and the result says why
    assert before["public.measures"].method == "rows" and "ratio (double)" in before["public.measures"].why_rows

    # WHEN the source changes in ways capture never sees (planted differences)
    source_db.execute(
        "UPDATE items SET price = price + 0.01 WHERE id = 10",  # a numeric off in its last digit
        "UPDATE items SET note = '' WHERE id = 21",  # NULL in silver, an empty string at the source
        "UPDATE items SET name = 'renamed' WHERE id = 11",  # two neighbours (one range), each in a column of its own
        "UPDATE items SET flag = NOT flag WHERE id = 12",
        "UPDATE items SET at = at + interval '1 microsecond' WHERE id = 1500",  # a timestamp off by 1 µs
        "UPDATE items SET data = '\\x00'::bytea WHERE id = 2999",
        "INSERT INTO items (id, name) VALUES (3001, 'new')",  # missing from silver
        "DELETE FROM items WHERE id = 5",  # only in silver
        "UPDATE codes SET label = 'changed' WHERE code = 'Ff5é'",
        "INSERT INTO events VALUES ('event 0', date '2024-02-02')",
        "UPDATE tags SET \"share%\" = 'x%' WHERE id = md5('7')::uuid",
    )
    conn = source_db.connect()
    try:
        after = {r.table: r for r in verify(engine, conn)}
        report = json.loads(comparisons_json(list(after.values())))
    finally:
        conn.close()

    # THEN each difference is named by key with its columns, nothing else
    items = after["public.items"]
    assert items.missing == ["id=3001"] and items.unexpected == ["id=5"]
    own = {"id=10": ["price"], "id=11": ["name"], "id=12": ["flag"], "id=21": ["note"], "id=1500": ["at"]}
    assert items.differing_columns == own | {"id=2999": ["data"]}
    # AND the report names each row with its own columns only, never one that differs in another row
    text = format_comparisons([items])
    assert "content differs: id=11 (columns: name)\n" in text and "content differs: id=12 (columns: flag)\n" in text
    # AND only the ranges holding them were read row by row (a few hundred rows of 3000, each side)
    assert 0 < items.ranges_differing <= 6 and items.rows_read < 1200, items.as_json()
    assert after["public.codes"].differing_columns == {"code=Ff5é": ["label"]}
    assert len(after["public.events"].missing) == 1 and not after["public.events"].unexpected
    assert after["public.tags"].differing_columns == {f"id={UUID(md5(b'7').hexdigest())}": ["share%"]}
    assert after["public.measures"].equal
    assert report["summary"] == {"equal": 1, "differing": 4, "lagging": 0, "skipped": 0}
    (items_json,) = [t for t in report["tables"] if t["table"] == "public.items"]
    assert items_json["different"] == own | {"id=2999": ["data"]}

    # WHEN verify reads the differing rows again once silver has caught up, as `cdclake verify` does
    waits = LiveSettings(wait_seconds=60.0, delivery_seconds=1.0, poll_seconds=0.2)
    live = LiveCheck(waits, partial(silver_position, engine))
    conn = source_db.connect()
    try:
        again = {r.table: r for r in verify_with(engine, PostgresDialect(conn), live=live)}["public.items"]
    finally:
        conn.close()
    # THEN each confirmed row still names its own columns only, and none of them was lag
    assert again.differing_columns == items.differing_columns and again.lag_resolved == 0, again.as_json()


def test_a_keyless_tables_differing_rows_are_named_by_their_values_the_same_in_every_run(
    source_db: SourceDatabase, apply_and_verify: Callable[[SourceDatabase], list[TableComparison]]
) -> None:
    # GIVEN a keyless table captured and applied (published for inserts only), equal to the source
    source_db.execute("CREATE TABLE events (id int, note text)", "INSERT INTO events VALUES (1, 'a'), (2, 'b')")
    source_db.capture()
    assert [r.equal for r in apply_and_verify(source_db)] == [True]
    # WHEN a row changes at the source (an update of a keyless table is not captured)
    source_db.execute("UPDATE events SET note = 'changed' WHERE id = 1")
    source_db.capture()
    results = [apply_and_verify(source_db)[0] for _ in range(2)]

    # THEN the row the source has and the one silver keeps are named apart, by their values and an
    # MD5 of them whole, and by the same names in a second run
    def name(note: str) -> str:
        digest = md5(f"1:1\x1f{len(note)}:{note}".encode()).hexdigest()[:12]
        return f"row (id=1, note={note}) md5:{digest} x1"

    for result in results:
        assert (result.missing, result.unexpected) == ([name("changed")], [name("a")])
    assert "  missing from silver: row (id=1, note=changed) md5:" in format_comparisons(results[:1])


EDGES = [
    "0001-01-01 00:00:00",
    "1900-03-01 12:00:00.5",
    "1969-12-31 23:59:59.999999",
    "1970-01-01 00:00:00",
    "1970-01-01 00:00:00.000001",
    "2024-02-29 12:34:56.789012",
    "9999-12-31 23:59:59.999999",
]


def test_a_timestamps_canonical_text_is_the_same_in_postgresql_and_spark(
    source_db: SourceDatabase, spark: SparkSession
) -> None:
    # GIVEN instants from the first year to the last, before and after 1970, to the microsecond
    conn = source_db.connect()
    try:
        with conn.cursor() as cur:
            # WHEN PostgreSQL writes each as a timestamptz and as a timestamp (a wall clock), and Spark as silver's
            # timestamp and timestamp_ntz
            source = {}
            for pg_type in ("timestamptz", "timestamp"):
                text = SQL.text(pg_type, "v", "timestamp")
                for edge in EDGES:
                    literal = f"{edge}+00" if pg_type == "timestamptz" else edge
                    cur.execute(f"SELECT {text} FROM (SELECT %s::{pg_type} AS v) AS t", (literal,))
                    source[(pg_type, edge)] = cur.fetchone()[0]
    finally:
        conn.close()
    values = ", ".join(f"(timestamp'{e}', timestamp_ntz'{e}')" for e in EDGES)
    frame = spark.sql(f"SELECT * FROM VALUES {values} AS v(instant, wall)")
    texts = frame.select(spark_text(F.col("instant"), "timestamp"), spark_text(F.col("wall"), "timestamp")).collect()
    # THEN both write the same text: the microseconds since 1970 UTC
    for edge, (instant, wall) in zip(EDGES, texts, strict=True):
        assert (source[("timestamptz", edge)], source[("timestamp", edge)]) == (instant, wall), edge
    assert source[("timestamp", "1969-12-31 23:59:59.999999")] == "-1"

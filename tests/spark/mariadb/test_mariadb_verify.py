"""``cdclake verify`` by checksums of key ranges against a real MariaDB: tables of every type ``init``
maps for MySQL, loaded into silver through DMS-format files (tests/mariadb_dms.py's stand-in), are
equal with no row read; each difference planted at the source afterwards is found, by key, with its
columns, after reading only the ranges that hold it; the command line says the same, as JSON."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cdclake.context import Engine
from cdclake.shells.cli import main
from cdclake.verify.checksum import spark_text
from cdclake.verify.mysql import checksums as mysql
from cdclake.verify.mysql.dialect import MysqlDialect
from cdclake.verify.report import format_comparisons
from cdclake.verify.result import TableComparison
from cdclake.verify.run import verify
from mariadb_dms import init_and_load

ROWS = 2000
SCHEMA = [
    """CREATE TABLE items (
        id INT PRIMARY KEY,
        t TINYINT, tu TINYINT UNSIGNED, s SMALLINT, su SMALLINT UNSIGNED, m MEDIUMINT, mu MEDIUMINT UNSIGNED,
        i INT UNSIGNED, b BIGINT, bu BIGINT UNSIGNED, y YEAR, flag TINYINT(1), bit1 BIT(1), bits BIT(12),
        price DECIMAL(12,2), wide DECIMAL(40,10), code CHAR(3), name VARCHAR(40), note TEXT,
        due DATE, local_at DATETIME(6), stamped TIMESTAMP(6) NULL DEFAULT NULL, at_time TIME(6),
        raw VARBINARY(16), fixed BINARY(4), blob_col BLOB, doc JSON,
        state ENUM('new','paid','shipped'), tags SET('a','b','c'))""",
    f"""INSERT INTO items SELECT seq, seq % 256 - 128, seq % 256, seq - 1000, seq * 30, seq * -4000, seq * 8000,
        seq * 2000000, seq * -4000000000000, 18446744073709551615 - seq, 1901 + seq % 255, seq % 2, seq % 2,
        seq % 4096, seq * 1.25 - 1000, CAST(CONCAT(seq, '12345678901234567890123.0123456789') AS DECIMAL(40,10)),
        CHAR(65 + seq % 26 USING utf8mb4), CONCAT('item é ', seq, ' 日本 😀'),
        CASE WHEN seq % 3 = 0 THEN NULL ELSE CONCAT('n', seq) END,
        DATE '2024-01-01' + INTERVAL seq DAY,
        TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND + INTERVAL seq * 7 MICROSECOND,
        TIMESTAMP '2030-06-30 23:00:00' + INTERVAL seq MINUTE + INTERVAL seq MICROSECOND,
        SEC_TO_TIME(seq * 401.000003 - 30000), UNHEX(LPAD(HEX(seq), 8, '0')), UNHEX(LPAD(HEX(seq * 3), 8, '0')),
        CONCAT('blob', CHAR(0), seq), JSON_OBJECT('n', seq, 'é', 'ü'), ELT(1 + seq % 3, 'new', 'paid', 'shipped'),
        ELT(1 + seq % 4, '', 'a', 'a,c', 'b,c')
    FROM (SELECT CAST(seq AS SIGNED) AS seq FROM seq_1_to_{ROWS}) AS numbers""",  # signed: seq - 1000
    "INSERT INTO items (id) VALUES (2001)",  # every other column NULL
    "CREATE TABLE codes (code VARCHAR(12) NOT NULL, label VARCHAR(40), UNIQUE KEY uk_code (code))",
    """INSERT INTO codes SELECT CONCAT(CHAR(65 + seq % 26 USING utf8mb4), CHAR(97 + seq % 7 USING utf8mb4), seq,
        CASE WHEN seq % 5 = 0 THEN 'é' WHEN seq % 7 = 0 THEN '😀' ELSE '' END), CONCAT('label ', seq)
    FROM seq_1_to_500""",
    "CREATE TABLE events (what VARCHAR(20), at DATETIME)",  # no key: compared as a multiset
    "INSERT INTO events SELECT CONCAT('event ', seq % 10), DATE '2024-02-01' + INTERVAL seq % 3 DAY FROM seq_1_to_200",
    "CREATE TABLE measures (id INT PRIMARY KEY, ratio DOUBLE)",
    "INSERT INTO measures SELECT seq, seq / 3 FROM seq_1_to_50",
]
PLANTED = [
    "UPDATE items SET name = 'changed' WHERE id = 10",  # a changed value
    "UPDATE items SET note = '' WHERE id = 21",  # NULL in silver, an empty string at the source
    "UPDATE items SET local_at = local_at + INTERVAL 1 MICROSECOND WHERE id = 1500",  # a datetime off by 1 µs
    "UPDATE items SET stamped = stamped + INTERVAL 1 MICROSECOND WHERE id = 1600",  # a timestamp off by 1 µs
    "UPDATE items SET price = price + 0.01 WHERE id = 700",  # a decimal off in its last digit
    "UPDATE items SET wide = wide + 0.0000000001, bits = bits ^ 1 WHERE id = 800",  # text of a decimal; BIT(12)
    "UPDATE items SET raw = UNHEX('00'), bit1 = 1 - bit1 WHERE id = 1999",
    "INSERT INTO items (id, name) VALUES (3001, 'new')",  # missing from silver
    "DELETE FROM items WHERE id = 5",  # only in silver
    "UPDATE codes SET label = 'changed' WHERE code = 'Pb15é'",
    "INSERT INTO events VALUES ('event 0', '2024-02-02')",
]


def _loaded(mariadb_server: Any, make_engine: Any, tmp_path: Path) -> tuple[Engine, str, Any]:
    database = mariadb_server.create_database()
    conn = mariadb_server.connect(database)
    with conn.cursor() as cursor:
        for statement in SCHEMA:
            cursor.execute(statement)
    config_path = tmp_path / "cdclake.yaml"
    engine, report = init_and_load(mariadb_server.url(database), conn, database, config_path, make_engine)
    assert not report.quarantined
    return engine, database, conn


def _verify(engine: Engine, conn: Any) -> dict[str, TableComparison]:
    results = verify(engine, MysqlDialect(conn))
    return {r.table.split(".", 1)[1]: r for r in results}


def test_every_mysql_type_is_proved_equal_by_checksums_and_each_planted_difference_is_named(
    mariadb_server: Any, make_engine: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN four tables loaded through DMS-format files: integer key, non-ASCII string key, no key, a double
    engine, database, conn = _loaded(mariadb_server, make_engine, tmp_path)
    assert engine.config.table("items").columns["stamped"] == "timestamp"  # an instant, in UTC
    assert engine.config.table("items").columns["local_at"] == "timestamp_ntz"  # a wall-clock value
    # WHEN verify compares them
    before = _verify(engine, conn)
    # THEN each is equal; those without floating point by checksums alone: no row read from either side
    assert all(r.equal for r in before.values()), format_comparisons(list(before.values()))
    for table in ("items", "codes", "events"):
        assert before[table].method == "checksums" and before[table].rows_read == 0, before[table].as_json()
    assert before["items"].ranges > 1 and before["items"].source_rows == ROWS + 1
    assert before["codes"].ranges > 1 and before["codes"].source_rows == 500 and before["events"].ranges == 1
    # AND the double column is compared value by value, and the result says why
    assert before["measures"].method == "rows" and "ratio (double)" in before["measures"].why_rows

    # WHEN the source changes in ways DMS never delivers (planted differences)
    with conn.cursor() as cursor:
        for statement in PLANTED:
            cursor.execute(statement)
    after = _verify(engine, conn)

    # THEN each difference is named by key with its columns, nothing else
    items = after["items"]
    assert items.missing == ["id=3001"] and items.unexpected == ["id=5"], items.as_json()
    assert items.differing_columns == {
        "id=10": ["name"],
        "id=21": ["note"],
        "id=1500": ["local_at"],
        "id=1600": ["stamped"],
        "id=700": ["price"],
        "id=800": ["bits", "wide"],
        "id=1999": ["bit1", "raw"],
    }
    # AND only the ranges holding them were read row by row
    assert 0 < items.ranges_differing <= 9 and items.rows_read < 1000, items.as_json()
    assert after["codes"].differing_columns == {"code=Pb15é": ["label"]} and after["codes"].rows_read < 200
    assert len(after["events"].missing) == 1 and not after["events"].unexpected
    assert after["measures"].equal

    # WHEN the command line verifies the same silver tables (a configuration naming them, the session's warehouse)
    cli_config = tmp_path / "cli.yaml"
    url = mariadb_server.url(database)
    bronze = ["--bronze", engine.config.bronze.path]
    init = ["init", "--source", url, "--database", engine.config.database]
    assert main(["-q", "--config", str(cli_config), *bronze, *init]) == 0
    capsys.readouterr()
    warehouse = engine.spark.conf.get("spark.sql.catalog.silver.warehouse")
    partitions = engine.spark.conf.get("spark.sql.shuffle.partitions")
    handler = signal.getsignal(signal.SIGINT)
    with conn.cursor() as cursor:  # a server whose sessions start in another zone than UTC
        cursor.execute("SET GLOBAL time_zone = '+02:00'")
    try:
        code = main(["-q", "--config", str(cli_config), "--warehouse", warehouse, "verify", "--source", url,
                     "--format", "json", "--delivery", "1"])  # fmt: skip
    finally:
        with conn.cursor() as cursor:
            cursor.execute("SET GLOBAL time_zone = 'SYSTEM'")
        signal.signal(signal.SIGINT, handler)
        engine.spark.conf.set("spark.sql.shuffle.partitions", partitions)
    # THEN it exits 1 and its JSON names the same differences (TIMESTAMP read in UTC all the same)
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert report["summary"] == {"equal": 1, "differing": 3, "lagging": 0, "skipped": 0}
    tables = {t["table"].split(".", 1)[1]: t for t in report["tables"]}
    assert tables["items"]["different"] == {k: items.differing_columns[k] for k in items.different}
    assert tables["items"]["missing"] == ["id=3001"] and tables["items"]["method"] == "checksums"
    # AND each difference was confirmed by reading it again once silver had caught up: none was lag
    assert tables["items"]["lag_resolved"] == 0 and tables["items"]["source_position"].endswith(" UTC")
    conn.close()


def test_a_timestamps_canonical_text_is_the_same_in_mariadb_and_spark(mariadb_server: Any, spark: SparkSession) -> None:
    # GIVEN wall clocks (DATETIME) from the first year MySQL takes to the last, and instants (TIMESTAMP) across its
    # range, to the microsecond, stored in a table
    walls = ["1000-01-01 00:00:00", "1969-12-31 23:59:59.999999", "1970-01-01 00:00:00", "9999-12-31 23:59:59.999999"]
    instants = ["1970-01-01 00:00:01", "2024-02-29 12:34:56.789012", "2038-01-19 03:14:07.999999"]
    conn = mariadb_server.connect(mariadb_server.create_database())
    try:
        with conn.cursor() as cursor:
            cursor.execute("CREATE TABLE t (n int PRIMARY KEY, wall datetime(6), instant timestamp(6) NULL)")
            cursor.executemany("INSERT INTO t (n, wall) VALUES (%s, %s)", list(enumerate(walls)))
            cursor.executemany("INSERT INTO t (n, instant) VALUES (%s, %s)", list(enumerate(instants, len(walls))))
            # WHEN MariaDB writes each (its session in UTC, as verify's) and Spark writes silver's timestamp_ntz and
            # timestamp
            wall = mysql.SQL.text("datetime(6)", "wall", "timestamp")
            instant = mysql.SQL.text("timestamp(6)", "instant", "timestamp")
            cursor.execute(f"SELECT COALESCE({wall}, {instant}) FROM t ORDER BY n")
            source = [row[0] for row in cursor.fetchall()]
    finally:
        conn.close()
    rows = [*(f"timestamp_ntz'{v}'" for v in walls), *(f"timestamp'{v}'" for v in instants)]
    texts = [spark.sql(f"SELECT {r} AS v").select(spark_text(F.col("v"), "timestamp")).first()[0] for r in rows]
    # THEN both write the same text: the microseconds since 1970 UTC
    assert source == texts
    assert source[1] == "-1"

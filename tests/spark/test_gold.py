"""Gold marts: incremental refresh equals a full recompute, broken marts are skipped, no-op refreshes.

Silver tables here are Iceberg tables with silver's properties (merge-on-read, so CDC-like MERGEs
write position delete files), changed with MERGE statements; the oracles are the mart's SQL
evaluated from scratch over silver and a plain-Python aggregation of the rows the test wrote.
"""

from __future__ import annotations

import random
import re
import threading
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.dms.store import LocalBronze
from cdclake.gold.groups import groups_and_key_ranges, incremental_shape_problem
from cdclake.gold.refresh import (
    FAILED,
    PATH_FULL,
    PATH_INCREMENTAL,
    REFRESHED,
    UP_TO_DATE,
)
from cdclake.gold.run import refresh_marts
from cdclake.gold.status import mart_statuses
from cdclake.lake.tables import TABLE_PROPERTIES

HostRow = tuple[int, str | None, str | None, int | None]  # id, country, city, rate
COUNTRIES = {"DE": "Europe", "FR": "Europe", "JP": "Asia", "BR": "America", None: None}
CITIES = {"DE": ["Berlin", "Hamburg"], "FR": ["Paris", None], "JP": ["Kyoto"], "BR": ["Rio"], None: [None]}

CONFIG = """
silver: {{database: {db}}}
# These tests check the incremental path's result: taken whatever the tables' size and the share
# of them the changes touch.
gold: {{full_refresh_share: 1000, full_refresh_below_mb: 0}}
tables:
  s.hosts: {{primary_key: [id], columns: {{id: int}}}}
  s.countries: {{primary_key: [country], columns: {{country: string}}}}
marts:
  - name: hosts_per_city
    sql: >-
      SELECT country, city, count(*) AS hosts, sum(rate) AS rate_sum, max(rate) AS best_rate
      FROM {db}.hosts GROUP BY country, city
    keys: [country, city]
  - name: hosts_per_continent
    sql: >-
      SELECT c.continent, count(h.id) AS hosts, min(h.rate) AS worst_rate
      FROM {db}.hosts h JOIN silver.{db}.countries c ON h.country = c.country
      GROUP BY c.continent
    keys: [continent]
  - name: well_rated
    sql: SELECT id, rate FROM {db}.hosts WHERE rate >= 50
"""


def _create(spark: SparkSession, identifier: str, schema: str) -> None:
    properties = ", ".join(f"'{k}'='{v}'" for k, v in TABLE_PROPERTIES.items())
    spark.sql(f"CREATE TABLE {identifier} ({schema}) USING iceberg TBLPROPERTIES ({properties})")


@pytest.fixture
def gold_engine(spark: SparkSession, tmp_path: Path) -> Engine:
    """Two silver tables (hosts, countries) in a fresh database and the marts of ``CONFIG``."""
    db = f"g_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE NAMESPACE silver.{db}")
    _create(spark, f"silver.{db}.hosts", "id int, country string, city string, rate int")
    _create(spark, f"silver.{db}.countries", "country string, continent string")
    rows = ", ".join(f"('{c}', '{k}')" for c, k in COUNTRIES.items() if c)
    spark.sql(f"INSERT INTO silver.{db}.countries VALUES {rows}")
    config = parse_config(CONFIG.format(db=db), "gold.yaml")
    return Engine(spark, config, LocalBronze(tmp_path))


def _merge(spark: SparkSession, table: str, changes: Sequence[tuple[str, tuple[Any, ...]]]) -> None:
    """One MERGE into silver ``table`` like a CDC batch: (op, row) with op I / U / D, each row's values
    in the table's column order, keyed by its first column."""

    def literal(value: Any) -> str:
        return "NULL" if value is None else f"'{value}'" if isinstance(value, str) else str(value)

    values = ", ".join(f"('{op}', {', '.join(literal(v) for v in row)})" for op, row in changes)
    fields = spark.table(table).schema.fields
    names = [f.name for f in fields]
    columns = ", ".join(names)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW test_changes AS SELECT * FROM VALUES {values} AS s(op, {columns})")
    # Cast to the table's types: a column of only NULLs in VALUES has none.
    new = {f.name: f"CAST(s.{f.name} AS {f.dataType.simpleString()})" for f in fields}
    spark.sql(
        f"""
        MERGE INTO {table} t USING test_changes s ON t.{names[0]} = s.{names[0]}
        WHEN MATCHED AND s.op = 'D' THEN DELETE
        WHEN MATCHED THEN UPDATE SET {", ".join(f"t.{n} = {new[n]}" for n in names[1:])}
        WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT ({columns}) VALUES ({", ".join(new.values())})
        """
    )


def _merge_hosts(spark: SparkSession, db: str, changes: list[tuple[str, HostRow]]) -> None:
    _merge(spark, f"silver.{db}.hosts", changes)


def _random_host(rng: random.Random, ident: int) -> HostRow:
    country = rng.choice(list(CITIES))
    rate = rng.choice([None, 10, 40, 50, 75, 100])
    return (ident, country, rng.choice(CITIES[country]), rate)


def _random_batch(rng: random.Random, state: dict[int, HostRow], next_id: int) -> list[tuple[str, HostRow]]:
    """Inserts, updates that move hosts between groups, deletes (groups vanish and appear)."""
    changes: list[tuple[str, HostRow]] = []
    for ident in rng.sample(sorted(state), k=min(len(state), rng.randint(0, 4))):
        if rng.random() < 0.4:
            changes.append(("D", state[ident]))
        else:
            changes.append(("U", _random_host(rng, ident)))
    for offset in range(rng.randint(0, 4)):
        changes.append(("I", _random_host(rng, next_id + offset)))
    return changes


def _rows(spark: SparkSession, identifier_or_sql: str, sql: bool = False) -> list[tuple[Any, ...]]:
    frame = spark.sql(identifier_or_sql) if sql else spark.table(identifier_or_sql)
    return sorted((tuple(r) for r in frame.collect()), key=repr)


def _per_city_oracle(state: dict[int, HostRow]) -> list[tuple[Any, ...]]:
    """hosts_per_city in plain Python (SQL semantics: NULL rates ignored, all-NULL sums are NULL)."""
    groups: dict[tuple[str | None, str | None], list[int | None]] = defaultdict(list)
    for _, country, city, rate in state.values():
        groups[(country, city)].append(rate)
    result = []
    for (country, city), rates in groups.items():
        known = [r for r in rates if r is not None]
        result.append((country, city, len(rates), sum(known) if known else None, max(known) if known else None))
    return sorted(result, key=repr)


@pytest.mark.parametrize("seed", [7, 21, 1234])
def test_incremental_refresh_equals_full_recompute_after_random_batches(gold_engine: Engine, seed: int) -> None:
    # GIVEN silver hosts with a first full refresh of every mart
    spark, db, rng = gold_engine.spark, gold_engine.config.database, random.Random(seed)
    state: dict[int, HostRow] = {}
    initial = [_random_host(rng, i) for i in range(1, 9)]
    _merge_hosts(spark, db, [("I", row) for row in initial])
    state.update({row[0]: row for row in initial})
    assert {r.outcome for r in refresh_marts(gold_engine)} == {REFRESHED}
    next_id = 100
    for batch_number in range(4):
        # WHEN a random batch is applied to silver (one batch also compacts, one changes a country's
        # continent) and the marts refresh
        changes = _random_batch(rng, state, next_id)
        next_id += 10
        if changes:
            _merge_hosts(spark, db, changes)
        for op, row in changes:
            state.pop(row[0], None) if op == "D" else state.__setitem__(row[0], row)
        if batch_number == 1:
            spark.sql(
                f"CALL silver.system.rewrite_data_files(table => '{db}.hosts', options => map('min-input-files','1'))"
            )
        if batch_number == 2:
            spark.sql(f"UPDATE silver.{db}.countries SET continent = 'Old World' WHERE country = 'FR'")
        results = {r.mart.split(".")[1]: r for r in refresh_marts(gold_engine)}
        # THEN keyed marts took the incremental path, and every mart equals its SQL from scratch
        for name in ("hosts_per_city", "hosts_per_continent"):
            assert results[name].outcome in (REFRESHED, UP_TO_DATE), results[name]
            if results[name].outcome == REFRESHED:
                assert results[name].path == PATH_INCREMENTAL, results[name]
        for mart in gold_engine.config.gold.marts:
            stored = _rows(spark, f"silver.{db}_gold.{mart.name}")
            assert stored == _rows(spark, mart.sql, sql=True), (seed, batch_number, mart.name)
        # AND the per-city mart equals the plain-Python aggregation of the rows written
        assert _rows(spark, f"silver.{db}_gold.hosts_per_city") == _per_city_oracle(state)


def test_refresh_with_nothing_new_is_a_no_op(gold_engine: Engine) -> None:
    # GIVEN marts refreshed once
    spark, db = gold_engine.spark, gold_engine.config.database
    _merge_hosts(spark, db, [("I", (1, "DE", "Berlin", 90))])
    refresh_marts(gold_engine)
    snapshots = spark.sql(f"SELECT count(*) FROM silver.{db}_gold.hosts_per_city.snapshots").first()
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup(None))
    # WHEN they are refreshed again without any silver commit
    results = refresh_marts(gold_engine)
    # THEN every mart is up to date, without a single Spark job (metadata reads only) and no commit
    assert [r.outcome for r in results] == [UP_TO_DATE] * 3
    assert set(tracker.getJobIdsForGroup(None)) - jobs_before == set()
    assert spark.sql(f"SELECT count(*) FROM silver.{db}_gold.hosts_per_city.snapshots").first() == snapshots


def test_each_refresh_is_one_commit_recording_the_silver_snapshots_read(gold_engine: Engine) -> None:
    # GIVEN a refreshed mart, then a silver change
    spark, db = gold_engine.spark, gold_engine.config.database
    _merge_hosts(spark, db, [("I", (1, "DE", "Berlin", 90)), ("I", (2, "JP", "Kyoto", 70))])
    refresh_marts(gold_engine)
    _merge_hosts(spark, db, [("U", (2, "DE", "Berlin", 60))])
    before = spark.sql(f"SELECT count(*) FROM silver.{db}_gold.hosts_per_continent.snapshots").first()[0]
    # WHEN the marts refresh
    refresh_marts(gold_engine)
    # THEN the join mart made exactly one commit, recording both silver tables' current snapshots
    snapshots = spark.sql(
        f"SELECT summary FROM silver.{db}_gold.hosts_per_continent.snapshots ORDER BY committed_at"
    ).collect()
    assert len(snapshots) == before + 1
    current = {
        f"{db}.{t}": spark.sql(f"SELECT snapshot_id FROM silver.{db}.{t}.refs WHERE name = 'main'").first()[0]
        for t in ("hosts", "countries")
    }
    import json

    assert json.loads(snapshots[-1]["summary"]["cdclake.gold.sources"]) == current
    assert snapshots[-1]["summary"]["cdclake.gold.path"] == PATH_INCREMENTAL


def test_broken_mart_is_skipped_with_its_reason_and_the_others_refresh(gold_engine: Engine) -> None:
    # GIVEN marts refreshed once, then a silver column the per-city mart reads is renamed
    spark, db = gold_engine.spark, gold_engine.config.database
    _merge_hosts(spark, db, [("I", (1, "DE", "Berlin", 90)), ("I", (2, "FR", "Paris", 80))])
    refresh_marts(gold_engine)
    kept = _rows(spark, f"silver.{db}_gold.hosts_per_city")
    spark.sql(f"ALTER TABLE silver.{db}.hosts RENAME COLUMN city TO town")
    _merge_hosts_renamed = f"INSERT INTO silver.{db}.hosts VALUES (3, 'JP', 'Kyoto', 70)"
    spark.sql(_merge_hosts_renamed)
    # WHEN the marts refresh
    results = {r.mart.split(".")[1]: r for r in refresh_marts(gold_engine)}
    # THEN the per-city mart failed, naming the column, and kept its content; the others refreshed
    assert results["hosts_per_city"].outcome == FAILED
    assert "city" in results["hosts_per_city"].reason and "does not compile" in results["hosts_per_city"].reason
    assert _rows(spark, f"silver.{db}_gold.hosts_per_city") == kept
    assert results["hosts_per_continent"].outcome == REFRESHED
    assert results["well_rated"].outcome == REFRESHED
    assert _rows(spark, f"silver.{db}_gold.well_rated") == [(1, 90), (2, 80), (3, 70)]


def test_a_mart_that_never_compiled_beside_a_good_one(gold_engine: Engine) -> None:
    # GIVEN a configuration with a mart reading a column silver does not have
    spark, db = gold_engine.spark, gold_engine.config.database
    broken = replace(gold_engine.config.gold.marts[2], name="broken", sql=f"SELECT nope FROM {db}.hosts")
    gold = replace(gold_engine.config.gold, marts=(broken, gold_engine.config.gold.marts[0]))
    engine = replace(gold_engine, config=replace(gold_engine.config, gold=gold))
    _merge_hosts(spark, db, [("I", (1, "DE", "Berlin", 90))])
    # WHEN the marts refresh
    results = refresh_marts(engine)
    # THEN the broken one is reported with the reason and not created; the good one is there
    assert results[0].outcome == FAILED and "`nope`" in results[0].reason
    assert not spark.catalog.tableExists(f"silver.{db}_gold.broken")
    assert results[1].outcome == REFRESHED
    assert _rows(spark, f"silver.{db}_gold.hosts_per_city") == [("DE", "Berlin", 1, 90, 90)]


def test_changed_definition_and_unkeyed_shapes_recompute_in_full(gold_engine: Engine) -> None:
    # GIVEN a keyed mart refreshed once, whose SQL then gains a HAVING clause
    spark, db = gold_engine.spark, gold_engine.config.database
    _merge_hosts(spark, db, [("I", (1, "DE", "Berlin", 90)), ("I", (2, "DE", "Hamburg", 10))])
    per_city = gold_engine.config.gold.marts[0]
    refresh_marts(gold_engine, [per_city])
    having = replace(per_city, sql=per_city.sql + " HAVING max(rate) > 50")
    # WHEN it refreshes with the new definition, then again after a silver change
    first = refresh_marts(gold_engine, [having])[0]
    _merge_hosts(spark, db, [("U", (2, "DE", "Hamburg", 60))])
    second = refresh_marts(gold_engine, [having])[0]
    # THEN both refreshes were full, with their reasons, and the mart equals its SQL
    assert (first.path, first.reason) == (PATH_FULL, "the mart's definition changed")
    assert (second.path, second.reason) == (
        PATH_FULL,
        "its SQL is not a GROUP BY of its keys (HAVING filters its groups)",
    )
    assert _rows(spark, f"silver.{db}_gold.hosts_per_city") == _rows(spark, having.sql, sql=True)
    assert len(_rows(spark, f"silver.{db}_gold.hosts_per_city")) == 2


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT city, count(*) AS n FROM v GROUP BY city HAVING count(*) > 1", "HAVING filters its groups"),
        ("SELECT city, count(*) AS n FROM v GROUP BY city LIMIT 5", "LIMIT above the GROUP BY"),
        ("SELECT DISTINCT city, count(*) AS n FROM v GROUP BY city", "DISTINCT above the GROUP BY"),
        ("SELECT city, rate AS n FROM v WHERE rate > 1", "it has no GROUP BY"),
    ],
)
def test_full_path_reason_names_the_sql_clause_not_the_plan_node(spark: SparkSession, sql: str, reason: str) -> None:
    # GIVEN a mart SQL that cannot be refreshed group by group
    spark.createDataFrame([("Berlin", 90)], "city string, rate int").createOrReplaceTempView("v")
    # WHEN its shape is checked / THEN the reason says which SQL clause is in the way, not Spark's node name
    assert incremental_shape_problem(spark.sql(sql), ["city"]) == f"its SQL is not a GROUP BY of its keys ({reason})"


def test_status_shows_rows_path_snapshots_and_lag(gold_engine: Engine) -> None:
    # GIVEN marts refreshed twice, then one more silver commit they do not reflect yet
    spark, db = gold_engine.spark, gold_engine.config.database
    _merge_hosts(spark, db, [("I", (1, "DE", "Berlin", 90)), ("I", (2, "FR", "Paris", 80))])
    refresh_marts(gold_engine)
    _merge_hosts(spark, db, [("I", (3, "FR", "Paris", 70))])
    refresh_marts(gold_engine)
    _merge_hosts(spark, db, [("D", (3, "FR", "Paris", 70))])
    # WHEN the status is read
    statuses = {s.mart.split(".")[1]: s for s in mart_statuses(gold_engine)}
    # THEN it shows rows, the path of the last refresh, the snapshots reflected and the lag
    per_city = statuses["hosts_per_city"]
    assert (per_city.rows, per_city.path, per_city.silver_commits_behind) == (2, PATH_INCREMENTAL, 1)
    assert per_city.lag_seconds is not None and per_city.lag_seconds >= 0
    assert f'"{db}.hosts"' in (per_city.silver_snapshots or "")
    assert (statuses["well_rated"].path, statuses["well_rated"].full_reason) == (PATH_FULL, "no keys")
    # AND after a refresh the marts are current again
    refresh_marts(gold_engine)
    assert {s.silver_commits_behind for s in mart_statuses(gold_engine)} == {0}


def test_independent_marts_refresh_at_once_and_a_mart_reading_a_mart_waits_for_it(
    gold_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cdclake.gold import refresh as gold_refresh
    from cdclake.mart_config import MartConfig

    # GIVEN the per-city and well-rated marts, a broken mart, and a mart over the per-city mart; two
    # refreshes at a time, the per-city and well-rated ones each waiting until the other one runs too
    spark, db = gold_engine.spark, gold_engine.config.database
    per_city, _, well_rated = gold_engine.config.gold.marts
    broken = replace(well_rated, name="broken", sql=f"SELECT nope FROM {db}.hosts")
    per_country = MartConfig(
        name="per_country", sql=f"SELECT country, sum(hosts) AS hosts FROM {db}_gold.hosts_per_city GROUP BY country"
    )
    marts = (per_country, per_city, well_rated, broken)
    config = replace(gold_engine.config, parallel_tables=2, gold=replace(gold_engine.config.gold, marts=marts))
    engine = replace(gold_engine, config=config)
    together = threading.Barrier(2, timeout=60)
    finished: list[str] = []
    real_refresh = gold_refresh.refresh_pinned

    def refresh_one(engine: Engine, mart: MartConfig) -> Any:
        if mart.name in (per_city.name, well_rated.name):
            together.wait()  # broken (BrokenBarrierError: the mart fails) unless both are in flight at once
        result = real_refresh(engine, mart)
        finished.append(mart.name)
        return result

    monkeypatch.setattr(gold_refresh, "refresh_pinned", refresh_one)
    _merge_hosts(spark, db, [("I", (1, "DE", "Berlin", 90)), ("I", (2, "FR", "Paris", 80))])
    for change in ([], [("I", (3, "DE", "Hamburg", 70))]):
        # WHEN the marts refresh (a second time after a silver change)
        if change:
            _merge_hosts(spark, db, change)
        results = {r.mart.split(".")[1]: r for r in refresh_marts(engine)}
        # THEN the independent marts refreshed together, the broken one failed alone, and the mart
        # over the per-city mart was refreshed after it, from its new content
        assert {n: r.outcome for n, r in results.items()} == {
            "per_country": REFRESHED, "hosts_per_city": REFRESHED, "well_rated": REFRESHED, "broken": FAILED,
        }, results  # fmt: skip
        assert "`nope`" in results["broken"].reason
        assert finished.index("per_country") > finished.index("hosts_per_city")
        assert _rows(spark, f"silver.{db}_gold.per_country") == _rows(spark, per_country.sql, sql=True)
        assert f"{db}_gold.hosts_per_city" in results["per_country"].sources
        finished.clear()
    assert _rows(spark, f"silver.{db}_gold.per_country") == [("DE", 2), ("FR", 1)]


# --------------------------------------------------------------------------- incremental or full: the cost

ORDER_FILES, ORDERS_PER_FILE, ORDERS_PER_CUSTOMER = 12, 50, 5
OrderRow = tuple[int, int, int]  # order_id, customer, amount


@pytest.fixture
def orders_engine(spark: SparkSession, tmp_path: Path) -> Engine:
    """Silver orders written as ``ORDER_FILES`` data files, each holding its own range of customers,
    and a keyed per-customer mart refreshed once; the default ``gold.full_refresh_share``, and no
    size below which marts refresh in full (the table is a few KB)."""
    db = f"k_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE NAMESPACE silver.{db}")
    _create(spark, f"silver.{db}.orders", "order_id int, customer int, amount int")
    rows = [(i, i // ORDERS_PER_CUSTOMER, i % 7) for i in range(ORDER_FILES * ORDERS_PER_FILE)]
    frame = spark.createDataFrame(rows, "order_id int, customer int, amount int")
    frame.repartitionByRange(ORDER_FILES, "order_id").sortWithinPartitions("order_id").writeTo(
        f"silver.{db}.orders"
    ).append()
    config = parse_config(
        f"""
silver: {{database: {db}}}
gold: {{full_refresh_below_mb: 0}}
tables:
  s.orders: {{primary_key: [order_id], columns: {{order_id: int}}}}
marts:
  - name: per_customer
    sql: >-
      SELECT customer, count(*) AS orders, sum(amount) AS amount, max(amount) AS top
      FROM {db}.orders GROUP BY customer
    keys: [customer]
""",
        "cost.yaml",
    )
    engine = Engine(spark, config, LocalBronze(tmp_path))
    assert refresh_marts(engine)[0].path == PATH_FULL
    return engine


def _merge_orders(spark: SparkSession, db: str, changes: list[tuple[str, OrderRow]]) -> None:
    _merge(spark, f"silver.{db}.orders", changes)


def _per_customer_oracle(spark: SparkSession, db: str) -> list[tuple[Any, ...]]:
    """per_customer in plain Python over the orders silver holds."""
    groups: dict[int, list[int]] = defaultdict(list)
    for _, customer, amount in spark.table(f"silver.{db}.orders").collect():
        groups[customer].append(amount)
    return sorted(((c, len(a), sum(a), max(a)) for c, a in groups.items()), key=repr)


def test_changes_in_every_file_refresh_in_full_saying_why(orders_engine: Engine) -> None:
    # GIVEN a mart refreshed once, then one order of every data file updated (a deletion and an
    # insert too): the changes touch every file of the table
    spark, db = orders_engine.spark, orders_engine.config.database
    changes = [("U", (f * ORDERS_PER_FILE + 3, f * 10, 100 + f)) for f in range(ORDER_FILES)]
    _merge_orders(spark, db, [*changes, ("D", (7, 0, 0)), ("I", (10_000, 3, 9))])
    # WHEN the mart refreshes
    result = refresh_marts(orders_engine)[0]
    # THEN it was refreshed in full, saying in plain words that a full refresh reads less
    assert result.path == PATH_FULL, result
    pattern = rf"the changes touch (\d+)% of the data files of {db}\.orders \([\d.]+ KB of [\d.]+ KB\): "
    found = re.fullmatch(pattern + "a full refresh reads less", result.reason)
    assert found is not None and int(found[1]) > 33, result.reason  # over the default share, a third
    # AND the reason is recorded with the commit, for status
    status = mart_statuses(orders_engine)[0]
    assert (status.path, status.full_reason) == (PATH_FULL, result.reason)
    # AND the mart equals its SQL from scratch and the plain-Python aggregation
    mart = orders_engine.config.gold.marts[0]
    assert _rows(spark, f"silver.{db}_gold.per_customer") == _rows(spark, mart.sql, sql=True)
    assert _rows(spark, f"silver.{db}_gold.per_customer") == _per_customer_oracle(spark, db)


@pytest.mark.parametrize(
    "changes",
    [
        # updates (one moving an order to another customer) and a deletion, all in the third file
        [("U", (101, 20, 50)), ("U", (120, 99, 60)), ("D", (133, 0, 0)), ("U", (149, 29, 0))],
        # new orders only, of existing and new customers
        [("I", (10_000, 3, 9)), ("I", (10_001, 3, 1)), ("I", (10_002, 500, 4))],
    ],
    ids=["one file", "inserts only"],
)
def test_changes_in_a_small_part_of_the_table_refresh_incrementally(
    orders_engine: Engine, changes: list[tuple[str, OrderRow]]
) -> None:
    # GIVEN a mart refreshed once, then changes confined to one of the table's files, or new rows
    spark, db = orders_engine.spark, orders_engine.config.database
    _merge_orders(spark, db, changes)
    # WHEN the mart refreshes
    result = refresh_marts(orders_engine)[0]
    # THEN it took the incremental path, recomputing the groups the changes touch only
    assert (result.path, result.reason) == (PATH_INCREMENTAL, ""), result
    loaded = ORDER_FILES * ORDERS_PER_FILE
    customers = {customer for op, (_, customer, _) in changes if op != "D"}
    customers |= {order // ORDERS_PER_CUSTOMER for _, (order, _, _) in changes if order < loaded}
    assert result.groups == len(customers)
    # AND the mart equals its SQL from scratch and the plain-Python aggregation
    mart = orders_engine.config.gold.marts[0]
    assert _rows(spark, f"silver.{db}_gold.per_customer") == _rows(spark, mart.sql, sql=True)
    assert _rows(spark, f"silver.{db}_gold.per_customer") == _per_customer_oracle(spark, db)


def test_the_affected_key_range_reaches_the_iceberg_scan(spark: SparkSession) -> None:

    # GIVEN a per-customer aggregation over an Iceberg table, and affected groups 5, 17 and NULL
    db = f"r_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE NAMESPACE silver.{db}")
    _create(spark, f"silver.{db}.orders", "order_id int, customer int, amount int")
    spark.sql(f"INSERT INTO silver.{db}.orders VALUES (1, 5, 1), (2, 9, 2), (3, 30, 3), (4, NULL, 4)")
    current = spark.sql(f"SELECT customer, sum(amount) AS amount FROM silver.{db}.orders GROUP BY customer")
    affected = spark.createDataFrame([(5,), (17,), (None,)], "customer int")
    # WHEN their count and key ranges are taken and the aggregation filtered by them
    groups, ranges = groups_and_key_ranges(affected, ["customer"])
    assert ranges is not None
    scoped = current.where(ranges)
    # THEN the filter is pushed below the aggregation into the Iceberg scan, where files are pruned
    plan = scoped._jdf.queryExecution().executedPlan().toString()
    assert "filters=((customer >= 5 AND customer <= 17) OR customer IS NULL)" in plan, plan
    assert groups == 3
    assert sorted((tuple(r) for r in scoped.collect()), key=repr) == [(5, 1), (9, 2), (None, 4)]


# --------------------------------------------------------------------------- history (SCD type 2)

Change = tuple[int, str | None, str, str]  # id, name, op, commit time (text)


# How history takes a batch: rows Spark computed in the driver (a small batch, ``lake.history_delta``:
# one RowDelta the driver writes), a few rows Spark holds (collected, the same RowDelta), or rows in
# Spark kept there (a MERGE: ``driver_versions=0``).
HISTORY_WAYS = ["driver", "collected", "spark"]
HISTORY_SCHEMA = "id int, name string, _cdc_order string, _cdc_op string, _cdc_ts string"


def _changes(spark: SparkSession, changes: list[Change], way: str = "driver") -> Any:
    """Change rows as a CDC batch hands them to history: key, data, _cdc_order, _cdc_op, _cdc_ts."""
    rows = [(ident, name, f"{ts}|{n:04d}", op, ts) for n, (ident, name, op, ts) in enumerate(changes)]
    return _the_way(spark.createDataFrame(rows, HISTORY_SCHEMA), way)


def _apply(spark: SparkSession, history: Any, changes: Any, way: str) -> Any:
    """``apply_history`` of ``changes`` (keyed by ``id``) the ``way`` asks."""
    from cdclake.lake.history import apply_history
    from cdclake.lake.history_delta import DRIVER_VERSIONS

    return apply_history(spark, history, changes, ["id"], driver_versions=0 if way == "spark" else DRIVER_VERSIONS)


def _the_way(frame: Any, way: str) -> Any:
    """``frame`` as ``way`` hands it to history: rows the driver holds (a ``LocalRelation``, as a
    small batch's are), or rows Spark holds (``createDataFrame`` from a list parallelizes them)."""
    from cdclake.lake.driver_write import collect_rows
    from cdclake.runtime.local_relation import local_frame

    return local_frame(frame.sparkSession, collect_rows(frame), frame.schema) if way == "driver" else frame


def _driver_files(spark: SparkSession, identifier: str) -> int:
    """How many of the table's live data files the driver wrote (``lake.driver_write``'s names)."""
    files = spark.sql(f"SELECT file_path FROM {identifier}.files WHERE content = 0").collect()
    return sum("/cdclake-data-" in row.file_path for row in files)


def _history_rows(spark: SparkSession, identifier: str) -> list[tuple[Any, ...]]:
    frame = spark.table(identifier).select(
        "id",
        "name",
        "operation",
        _clock("valid_from"),
        _clock("valid_to"),
        "is_current",
    )
    return sorted((tuple(r) for r in frame.collect()), key=lambda r: (r[0], r[3]))


def _clock(column: str) -> Any:
    """A timestamp column as HH:mm (the tests' changes all fall on one day)."""
    from pyspark.sql import functions as F

    return F.date_format(column, "HH:mm").alias(column)


@pytest.fixture
def history_table(spark: SparkSession) -> Any:
    from cdclake.lake.history import history_of
    from cdclake.lake.tables import SilverTable

    db = f"h_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE NAMESPACE silver.{db}")
    return history_of(SilverTable("silver", db, "people"))


@pytest.mark.parametrize("way", HISTORY_WAYS)
def test_late_change_splits_the_version_it_falls_into_and_deletes_close(
    spark: SparkSession, history_table: Any, way: str
) -> None:
    day = "2024-03-01 "
    # GIVEN a history with id 1 inserted at 09:00 and updated at 11:00, id 2 inserted at 09:00
    first = [(1, "a", "I", day + "09:00:00"), (1, "c", "U", day + "11:00:00"), (2, "x", "I", day + "09:00:00")]
    _apply(spark, history_table, _changes(spark, first, way), way)
    # WHEN a late batch arrives: id 1 updated at 10:00 (between the two), id 2 deleted at 10:00
    late = _changes(spark, [(1, "b", "U", day + "10:00:00"), (2, None, "D", day + "10:00:00")], way)
    report = _apply(spark, history_table, late, way)
    # (the driver writes the batch's versions itself; Spark's MERGE writes its own files)
    assert _driver_files(spark, history_table.identifier) == (0 if way == "spark" else 1)
    # THEN the late update split id 1's first version, and the delete closed id 2's version
    expected = [
        (1, "a", "I", "09:00", "10:00", False),
        (1, "b", "U", "10:00", "11:00", False),
        (1, "c", "U", "11:00", None, True),
        (2, "x", "I", "09:00", "10:00", False),
        (2, None, "D", "10:00", None, False),
    ]
    assert _history_rows(spark, history_table.identifier) == expected
    assert (report.versions_added, report.versions_closed) == (2, 2)
    # AND applying the same batch again changes nothing (exactly once)
    assert _apply(spark, history_table, late, way).versions_added == 0
    assert _history_rows(spark, history_table.identifier) == expected
    # AND a change older than the delete lands before it, not after
    _apply(spark, history_table, _changes(spark, [(2, "y", "U", day + "09:30:00")], way), way)
    assert _history_rows(spark, history_table.identifier)[3:] == [
        (2, "x", "I", "09:00", "09:30", False),
        (2, "y", "U", "09:30", "10:00", False),
        (2, None, "D", "10:00", None, False),
    ]


def _timeline_oracle(changes: list[Change]) -> list[tuple[Any, ...]]:
    """The expected history in plain Python: per key, versions in commit order, each ending at the next."""
    by_key: dict[int, list[tuple[str, int, Change]]] = defaultdict(list)
    for n, change in enumerate(changes):
        by_key[change[0]].append((change[3], n, change))
    result = []
    for ident, versions in by_key.items():
        versions.sort()
        for i, (ts, _, (_, name, op, _)) in enumerate(versions):
            following = versions[i + 1][0][11:16] if i + 1 < len(versions) else None
            result.append((ident, name, op, ts[11:16], following, following is None and op != "D"))
    return sorted(result, key=lambda r: (r[0], r[3]))


@pytest.mark.parametrize(("seed", "way"), [(3, "driver"), (99, "collected"), (3, "spark")])
def test_history_of_batches_delivered_out_of_order_equals_the_timeline(
    spark: SparkSession, history_table: Any, seed: int, way: str
) -> None:
    # GIVEN a random change log of a few keys (distinct commit minutes), cut into batches
    rng = random.Random(seed)
    minutes = rng.sample(range(0, 60 * 9), 14)
    log: list[Change] = []
    live: set[int] = set()
    for minute in sorted(minutes):
        ident = rng.randint(1, 4)
        op = ("D" if rng.random() < 0.3 else "U") if ident in live else "I"
        live.discard(ident) if op == "D" else live.add(ident)
        ts = f"2024-03-01 {9 + minute // 60:02d}:{minute % 60:02d}:00"
        log.append((ident, None if op == "D" else f"v{minute}", op, ts))
    cuts = sorted(rng.sample(range(1, len(log)), 3))
    batches = [log[a:b] for a, b in zip([0, *cuts], [*cuts, len(log)], strict=True)]
    # WHEN the batches arrive in random order, one of them twice
    order = rng.sample(range(len(batches)), len(batches))
    for index in [*order, order[0]]:
        numbered = _the_way(
            spark.createDataFrame(
                [(i, n, f"{ts}|{log.index((i, n, op, ts)):04d}", op, ts) for i, n, op, ts in batches[index]],
                HISTORY_SCHEMA,
            ),
            way,
        )
        _apply(spark, history_table, numbered, way)
    # THEN the history is every key's timeline, and its current rows are the source's live rows
    history = _history_rows(spark, history_table.identifier)
    assert history == _timeline_oracle(log)
    assert {r[0] for r in history if r[5]} == live


# --------------------------------------------------------------------------- consistent marts

ORDERS_CONFIG = """
silver: {{database: {db}}}
tables:
  s.orders: {{primary_key: [order_id], columns: {{order_id: int}}{history}}}
  s.lines: {{primary_key: [order_id, line], columns: {{order_id: int, line: int}}}}
marts:
  - name: order_totals
    sql: >-
      SELECT o.order_id, count(l.line) AS lines, sum(l.amount) AS total
      FROM {db}.orders o LEFT JOIN {db}.lines l ON o.order_id = l.order_id GROUP BY o.order_id
    consistent: true
"""


def _cdc_commit(spark: SparkSession, identifier: str, values: str, commit_ts: str) -> None:
    """Append rows as one silver CDC commit that is complete up to ``commit_ts``."""
    from cdclake.lake.ledger_record import LedgerRecord
    from cdclake.lake.tables import commit_with_properties

    statement = f"INSERT INTO {identifier} VALUES {values}"
    commit_with_properties(
        spark, LedgerRecord.batch([f"f-{uuid.uuid4().hex}"], commit_ts).properties(), lambda: spark.sql(statement)
    )


def _orders_engine(spark: SparkSession, tmp_path: Path, history: bool) -> Engine:
    db = f"c_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE NAMESPACE silver.{db}")
    _create(spark, f"silver.{db}.orders", "order_id int, customer string")
    _create(spark, f"silver.{db}.lines", "order_id int, line int, amount int")
    config = parse_config(ORDERS_CONFIG.format(db=db, history=", history: true" if history else ""), "c.yaml")
    return Engine(spark, config, LocalBronze(tmp_path))


def test_consistent_mart_never_shows_half_of_a_source_transaction(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN transaction 1 (10:00: order 1 and its two lines) applied to both tables, and of
    # transaction 2 (11:00: order 2 and its line) only the orders file so far
    engine = _orders_engine(spark, tmp_path, history=False)
    db = engine.config.database
    _cdc_commit(spark, f"silver.{db}.orders", "(1, 'ann')", "2024-03-01 10:00:00.000000")
    _cdc_commit(spark, f"silver.{db}.lines", "(1, 1, 5), (1, 2, 7)", "2024-03-01 10:00:00.000000")
    _cdc_commit(spark, f"silver.{db}.orders", "(2, 'bob')", "2024-03-01 11:00:00.000000")
    # WHEN the consistent mart refreshes
    first = refresh_marts(engine)[0]
    # THEN it is computed at 10:00, without order 2 (whose lines silver does not have yet)
    assert (first.outcome, first.reason) == (REFRESHED, "consistent cut at 2024-03-01 10:00:00.000000")
    assert _rows(spark, f"silver.{db}_gold.order_totals") == [(1, 2, 12)]
    assert "(2, 0, None)" in repr(_rows(spark, engine.config.gold.marts[0].sql, sql=True))  # silver as it is now
    # AND once the lines file of transaction 2 is applied, the mart moves to 11:00
    _cdc_commit(spark, f"silver.{db}.lines", "(2, 1, 30)", "2024-03-01 11:00:00.000000")
    assert refresh_marts(engine)[0].reason == "consistent cut at 2024-03-01 11:00:00.000000"
    assert _rows(spark, f"silver.{db}_gold.order_totals") == [(1, 2, 12), (2, 1, 30)]
    assert refresh_marts(engine)[0].outcome == UP_TO_DATE


def test_consistent_mart_reads_a_faster_table_from_its_history(spark: SparkSession, tmp_path: Path) -> None:
    from cdclake.lake.history import apply_history, history_of
    from cdclake.lake.tables import SilverTable

    # GIVEN orders (with history) applied up to 11:00 in one batch, lines only up to 10:00:
    # no snapshot of orders stops at 10:00
    engine = _orders_engine(spark, tmp_path, history=True)
    db = engine.config.database
    _cdc_commit(spark, f"silver.{db}.orders", "(1, 'ann'), (2, 'bob')", "2024-03-01 11:00:00.000000")
    changes = spark.createDataFrame(
        [(1, "ann", "10", "I", "2024-03-01 10:00:00"), (2, "bob", "11", "I", "2024-03-01 11:00:00")],
        "order_id int, customer string, _cdc_order string, _cdc_op string, _cdc_ts string",
    )
    apply_history(spark, history_of(SilverTable("silver", db, "orders")), changes, ["order_id"])
    _cdc_commit(spark, f"silver.{db}.lines", "(1, 1, 5)", "2024-03-01 10:00:00.000000")
    # WHEN the consistent mart refreshes
    result = refresh_marts(engine)[0]
    # THEN orders are read as they were at 10:00, from their history
    assert result.reason == "consistent cut at 2024-03-01 10:00:00.000000"
    assert _rows(spark, f"silver.{db}_gold.order_totals") == [(1, 1, 5)]

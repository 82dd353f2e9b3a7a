"""The ``gold:`` / ``marts:`` configuration and the table references in a mart's SQL (pure, no Spark)."""

from __future__ import annotations

import pytest

from cdclake.config import parse_config
from cdclake.errors import ConfigError, UnknownTableError
from cdclake.gold.consistent import SourceTimeline, choose_cut
from cdclake.gold.refresh import gold_database
from cdclake.lake.tables import SilverTable
from cdclake.mart_config import MartConfig
from cdclake.mart_sql import (
    SqlSyntaxError,
    definition_id,
    group_merge_statement,
    referenced_tables,
    substitute_tables,
)

BASE = """
silver:
  database: airbnb
tables:
  public.hosts:
    target: hosts_silver
    primary_key: [id]
    columns: {id: int, city: string}
"""


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "t.yaml")
    return str(caught.value)


# --------------------------------------------------------------------------- marts: parsing


def test_marts_are_parsed_with_their_settings() -> None:
    # GIVEN a mart with keys, partitioning and a consistent cut
    text = (
        BASE
        + """
gold:
  database: bi
marts:
  - name: hosts_per_city
    sql: SELECT city, count(*) AS hosts FROM airbnb.hosts_silver GROUP BY city
    keys: [city]
    partition_by: city
    consistent: true
"""
    )
    # WHEN the configuration is parsed
    config = parse_config(text, "t.yaml")
    # THEN the mart keeps every setting and the gold database is the one named
    assert config.gold.marts == (
        MartConfig(
            name="hosts_per_city",
            sql="SELECT city, count(*) AS hosts FROM airbnb.hosts_silver GROUP BY city",
            keys=("city",),
            partition_by=("city",),
            consistent=True,
        ),
    )
    assert gold_database(config) == "bi"


def test_gold_database_defaults_to_the_silver_database_with_suffix() -> None:
    # GIVEN a configuration without a gold section / WHEN parsed
    config = parse_config(BASE, "t.yaml")
    # THEN marts go to <silver database>_gold and there are none
    assert gold_database(config) == "airbnb_gold"
    assert config.gold.marts == ()


def test_full_refresh_settings_have_defaults_and_may_be_set() -> None:
    # GIVEN a configuration without the settings, and one with them
    default = parse_config(BASE, "t.yaml")
    chosen = parse_config(BASE + "gold:\n  full_refresh_share: 0.5\n  full_refresh_below_mb: 1.5\n", "t.yaml")
    # WHEN parsed / THEN the defaults are a third and 64 MiB; the settings keep the gold database's default
    assert (default.gold.full_refresh_share, default.gold.full_refresh_below_bytes) == (pytest.approx(1 / 3), 64 << 20)
    assert (chosen.gold.full_refresh_share, chosen.gold.full_refresh_below_bytes) == (0.5, 3 << 19)
    assert gold_database(chosen) == "airbnb_gold"


def test_mart_lookup_by_name_and_unknown_mart() -> None:
    config = parse_config(BASE + "marts:\n  - name: m\n    sql: SELECT * FROM airbnb.hosts_silver\n", "t.yaml")
    assert config.gold.mart("m").keys == ()
    with pytest.raises(UnknownTableError, match="Mart 'nope' is not in the configuration"):
        config.gold.mart("nope")


def test_sql_trailing_semicolon_is_dropped() -> None:
    config = parse_config(BASE + "marts:\n  - name: m\n    sql: SELECT * FROM airbnb.hosts_silver ;\n", "t.yaml")
    assert config.gold.marts[0].sql == "SELECT * FROM airbnb.hosts_silver"


@pytest.mark.parametrize(
    ("marts", "message"),
    [
        ("marts:\n  - sql: SELECT 1\n", "line 10: a mart needs a 'name'"),
        ("marts:\n  - name: m\n", "line 10: mart m needs 'sql'"),
        ("marts:\n  - name: m\n    sql: DELETE FROM airbnb.hosts_silver\n", "line 11: mart m.sql must be a query"),
        ("marts:\n  - name: m\n    sql: SELECT 1 AS one\n", "line 11: mart m.sql reads none of the configured"),
        ("marts:\n  - name: m\n    sql: SELECT 'x FROM airbnb.hosts_silver\n", "line 11: mart m.sql: a string"),
        ("marts:\n  - name: m\n    sql: SELECT 1\n    colour: red\n", "line 12: unknown key 'colour' in a mart"),
        ("marts:\n  - name: bad-name\n    sql: SELECT 1\n", "line 10: mart name 'bad-name' is not a valid"),
        (
            "marts:\n  - name: m\n    sql: SELECT * FROM airbnb.hosts_silver\n    keys: [a, a]\n",
            "line 12: mart m.keys names a column twice",
        ),
        (
            "marts:\n  - name: m\n    sql: SELECT * FROM airbnb.hosts_silver\n    consistent: maybe\n",
            "line 12: mart m.consistent must be true or false",
        ),
        (
            "marts:\n  - name: m\n    sql: SELECT * FROM airbnb.hosts_silver\n"
            "  - name: m\n    sql: SELECT * FROM airbnb.hosts_silver\n",
            "line 12: duplicate mart 'm'",
        ),
        ("marts:\n  name: m\n", "line 10: 'marts' must be a list"),
        ("gold:\n  database: airbnb\n", "line 10: gold.database must differ from silver.database"),
        ("gold:\n  schema: x\n", "line 10: unknown key 'schema' in gold"),
        ("gold:\n  full_refresh_share: 0\n", "line 10: gold.full_refresh_share must be a number above 0, not '0'"),
        ("gold:\n  full_refresh_share: most\n", "line 10: gold.full_refresh_share must be a number above 0"),
        ("gold:\n  full_refresh_below_mb: -1\n", "line 10: gold.full_refresh_below_mb must be a number of MiB"),
    ],
)
def test_mart_mistakes_name_their_line(marts: str, message: str) -> None:
    # GIVEN a configuration whose marts section has one mistake
    # WHEN it is parsed / THEN the error names the file, the line and the mistake
    assert message in config_error(BASE + marts)


def test_history_is_a_table_setting_that_needs_a_key() -> None:
    # GIVEN a keyed table with history and a keyless one asking for it
    keyed = parse_config(BASE.replace("primary_key: [id]", "primary_key: [id]\n    history: true"), "t.yaml")
    assert keyed.tables[0].history is True
    keyless = "tables:\n  public.log:\n    append_only: true\n    history: true\n    columns: {a: int}\n"
    # THEN the keyless one is refused, naming the line
    assert "t.yaml, line 4: table public.log.history needs a primary_key" in config_error(keyless)


def test_a_mart_may_read_a_history_table() -> None:
    text = BASE.replace("primary_key: [id]", "primary_key: [id]\n    history: true")
    text += "marts:\n  - name: m\n    sql: SELECT * FROM airbnb.hosts_silver__history\n"
    assert parse_config(text, "t.yaml").gold.marts[0].name == "m"


# --------------------------------------------------------------------------- SQL table references

KNOWN = {"airbnb.hosts_silver": "hosts_silver", "shop.orders": "orders"}


def test_references_are_found_qualified_quoted_and_in_order() -> None:
    sql = "SELECT * FROM silver.shop.orders o JOIN `airbnb`.`Hosts_Silver` h ON o.host = h.id"
    assert referenced_tables(sql, KNOWN) == ["shop.orders", "airbnb.hosts_silver"]


def test_strings_and_comments_are_not_references() -> None:
    sql = "SELECT 'airbnb.hosts_silver' AS t -- shop.orders\n/* shop.orders */ FROM airbnb.hosts_silver"
    assert referenced_tables(sql, KNOWN) == ["airbnb.hosts_silver"]


def test_substitution_replaces_tables_and_column_qualifiers_only() -> None:
    # GIVEN SQL that names a table in FROM, as a column qualifier, in a string and in a comment
    sql = (
        'SELECT airbnb.hosts_silver.id, "airbnb.hosts_silver" AS s -- airbnb.hosts_silver\n'
        "FROM silver.airbnb.hosts_silver WHERE x = 1.5"
    )
    # WHEN the table is replaced by a view
    result = substitute_tables(sql, {"airbnb.hosts_silver": "v0"})
    # THEN only the table and the qualifier change
    assert result == 'SELECT v0.id, "airbnb.hosts_silver" AS s -- airbnb.hosts_silver\nFROM v0 WHERE x = 1.5'


def test_unclosed_quoted_name_is_a_syntax_error() -> None:
    with pytest.raises(SqlSyntaxError, match="quoted"):
        referenced_tables("SELECT * FROM `airbnb.hosts_silver", KNOWN)


def test_doubled_backquote_inside_a_quoted_name() -> None:
    assert referenced_tables("SELECT `a``b` FROM airbnb.hosts_silver", KNOWN) == ["airbnb.hosts_silver"]


def test_definition_id_ignores_whitespace_but_not_keys() -> None:
    base = definition_id("SELECT a\n  FROM t", ["a"], [], False)
    assert base == definition_id("SELECT a FROM t", ["a"], [], False)
    assert base != definition_id("SELECT a FROM t", [], [], False)
    assert base != definition_id("SELECT b FROM t", ["a"], [], False)


def test_group_merge_matches_null_safely_and_deletes_vanished_groups() -> None:
    statement = group_merge_statement("gold.m", "src", ["city", "hosts"], ["city"])
    assert "ON t.`city` <=> s.`_cdc_key_city`" in statement
    assert "WHEN MATCHED AND s._cdc_present IS NULL THEN DELETE" in statement
    assert "WHEN NOT MATCHED AND s._cdc_present IS NOT NULL THEN INSERT (`city`, `hosts`)" in statement


# --------------------------------------------------------------------------- consistent cut (pure)


def _timeline(name: str, reached: list[str], history: bool = False) -> SourceTimeline:
    table = SilverTable("silver", "db", name)
    return SourceTimeline(name, table, [(i, t) for i, t in enumerate(reached)], table if history else None)


def test_cut_is_the_latest_time_every_table_without_history_stopped_at() -> None:
    orders, lines = _timeline("orders", ["10:00", "11:00"]), _timeline("lines", ["10:00"])
    assert choose_cut([orders, lines]) == "10:00"


def test_no_common_time_means_waiting_unless_the_faster_table_keeps_history() -> None:
    lines = _timeline("lines", ["10:00"])
    assert choose_cut([_timeline("orders", ["11:00"]), lines]) is None
    assert choose_cut([_timeline("orders", ["11:00"], history=True), lines]) == "10:00"
    # a table with history can only be read up to the time it has reached
    assert choose_cut([_timeline("orders", ["09:00"], history=True), lines]) is None


def test_all_tables_with_history_meet_at_the_slowest() -> None:
    timelines = [_timeline("a", ["09:00", "12:00"], history=True), _timeline("b", ["11:00"], history=True)]
    assert choose_cut(timelines) == "11:00"


def test_a_table_named_with_a_hyphen_is_found_when_quoted() -> None:
    # GIVEN silver's inventory.order-items, read by a mart with its name in backquotes
    known = {"inventory.order-items": "order-items"}
    sql = "SELECT o.`order-id`, count(*) AS n FROM inventory.`order-items` o GROUP BY o.`order-id`"
    # WHEN / THEN it is a reference, and substitution puts the view in its place
    assert referenced_tables(sql, known) == ["inventory.order-items"]
    assert substitute_tables(sql, {"inventory.order-items": "v0"}) == sql.replace("inventory.`order-items`", "v0")

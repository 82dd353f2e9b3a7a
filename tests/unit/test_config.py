"""The table configuration: parsing, defaults, lookups, and errors that name their line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdclake.config import BronzeSettings, CleaningRules, StoreSettings, load_config, parse_config
from cdclake.errors import ConfigError, UnknownTableError
from cdclake.types import normalise_type

TWO_TABLES = """
tables:
  public.hosts:
    target: hosts_silver
    primary_key: [id]
    columns: {id: int}
  sales.orders:
    primary_key: [id]
    columns: {id: int}
"""


def config_error(text: str) -> str:
    """The message of the ConfigError that parsing ``text`` raises."""
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "t.yaml")
    return str(caught.value)


# --------------------------------------------------------------------------- the shipped example


def test_example_hosts_yaml_primary_key(hosts_yaml: Path) -> None:
    # GIVEN the example configuration shipped with the package
    # WHEN it is loaded
    config = load_config(hosts_yaml)
    # THEN its only table is keyed on id
    assert config.tables[0].primary_key == ("id",)


def test_example_hosts_yaml_columns_keep_file_order(hosts_yaml: Path) -> None:
    # GIVEN / WHEN the example configuration is loaded
    table = load_config(hosts_yaml).table("public.hosts_demo")
    # THEN the columns keep the order of the file, with their declared types
    assert list(table.columns.items()) == [
        ("id", "int"),
        ("url", "string"),
        ("name", "string"),
        ("since", "string"),
        ("location", "string"),
        ("response_time", "string"),
        ("response_rate", "string"),
    ]


def test_example_hosts_yaml_cleaning_rules(hosts_yaml: Path) -> None:
    # GIVEN / WHEN the example configuration is loaded
    table = load_config(hosts_yaml).tables[0]
    # THEN the cleaning rules are exactly the ones written in the file
    assert table.clean == CleaningRules(
        cast={"since": "date", "last_updated_ts": "timestamp"},
        derive={
            "location_city": "split(location, ', *')[0]",
            "location_country": "split(location, ', *')[1]",
        },
        rename={},
        drop=("location",),
    )


def test_example_hosts_yaml_target_and_database(hosts_yaml: Path) -> None:
    # GIVEN / WHEN the example configuration is loaded
    config = load_config(hosts_yaml)
    # THEN the silver table and database are the configured ones
    assert (config.database, config.tables[0].target, config.tables[0].source) == (
        "airbnb",
        "hosts_silver",
        "public.hosts_demo",
    )


def test_example_hosts_yaml_bronze_settings(hosts_yaml: Path) -> None:
    # GIVEN / WHEN the example configuration is loaded
    bronze = load_config(hosts_yaml).bronze
    # THEN the bronze settings mirror a headerless DMS CSV endpoint
    assert bronze == BronzeSettings(
        path="bronze",
        format="csv",
        csv_header=False,
        csv_delimiter=",",
        csv_null_value="",
        include_op_for_full_load=False,
        timestamp_column="last_updated_ts",
        change_sequence_column="AR_H_CHANGE_SEQ",
    )


# --------------------------------------------------------------------------- valid documents


def test_defaults_when_only_tables_are_given() -> None:
    # GIVEN a configuration with nothing but one table
    config = parse_config("tables:\n  s.t:\n    columns: {id: int}\n")
    # THEN the bronze settings, database and batch size take their defaults
    assert (config.bronze, config.database, config.max_files_per_batch) == (BronzeSettings(), "cdclake", 500)


def test_target_defaults_to_source_table_name() -> None:
    # GIVEN a table without a target
    config = parse_config("tables:\n  s.orders:\n    columns: {id: int}\n")
    # THEN the silver table is named after the source table
    assert config.tables[0].target == "orders"


def test_max_files_per_batch() -> None:
    # GIVEN a cdc section
    config = parse_config("cdc: {max_files_per_batch: 25}\ntables:\n  s.t:\n    columns: {id: int}\n")
    # THEN the batch size is read
    assert config.max_files_per_batch == 25


def test_composite_primary_key() -> None:
    # GIVEN a table with a two-column key
    config = parse_config("tables:\n  s.t:\n    primary_key: [a, b]\n    columns: {a: int, b: string, c: string}\n")
    # THEN the key keeps its order
    assert config.tables[0].primary_key == ("a", "b")


def test_primary_key_as_a_single_name() -> None:
    # GIVEN a key written as a plain name rather than a list
    config = parse_config("tables:\n  s.t:\n    primary_key: id\n    columns: {id: int}\n")
    # THEN it is a one-column key
    assert config.tables[0].primary_key == ("id",)


def test_silver_key_follows_renames() -> None:
    # GIVEN a composite key whose first column is renamed in silver
    config = parse_config(
        "tables:\n  s.t:\n    primary_key: [id, region]\n    columns: {id: int, region: string}\n"
        "    clean:\n      rename: {id: host_id}\n"
    )
    # THEN the silver key uses the new name and keeps the other one
    assert config.tables[0].silver_key() == ("host_id", "region")


def test_append_only_table_has_no_key() -> None:
    # GIVEN an append-only table
    table = parse_config("tables:\n  s.log:\n    append_only: true\n    columns: {msg: string}\n").tables[0]
    # THEN it is append-only and not keyed
    assert (table.append_only, table.is_keyed) == (True, False)


def test_headered_csv_table_needs_no_columns() -> None:
    # GIVEN CSV files with a header row and a table without columns
    config = parse_config("bronze: {csv_header: true}\ntables:\n  s.t:\n    primary_key: [id]\n")
    # THEN the table is accepted with no declared columns
    assert config.tables[0].columns == {}


def test_types_are_normalised_in_columns() -> None:
    # GIVEN column types in aliases and odd spellings
    config = parse_config("tables:\n  s.t:\n    columns: {a: INTEGER, b: Long, c: 'decimal( 10 , 2 )'}\n")
    # THEN they are stored in canonical Spark SQL spelling
    assert config.tables[0].columns == {"a": "int", "b": "bigint", "c": "decimal(10,2)"}


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("string", "string"),
        ("INT", "int"),
        ("integer", "int"),
        ("long", "bigint"),
        ("decimal(38,38)", "decimal(38,38)"),
    ],
)
def test_normalise_type(written: str, canonical: str) -> None:
    # GIVEN / WHEN a type name is normalised / THEN its canonical spelling is returned
    assert normalise_type(written) == canonical


@pytest.mark.parametrize("bad", ["varchar", "decimal(39,2)", "decimal(0,0)", "decimal(5,6)", "decimal(10)"])
def test_normalise_type_rejects(bad: str) -> None:
    # GIVEN / WHEN an unknown type or impossible decimal is normalised / THEN ValueError names it
    with pytest.raises(ValueError, match=re.escape(f"unknown type '{bad}'")):
        normalise_type(bad)


# --------------------------------------------------------------------------- lookups


@pytest.mark.parametrize("name", ["public.hosts", "hosts", "hosts_silver"])
def test_table_lookup_by_source_table_or_target(name: str) -> None:
    # GIVEN two tables
    config = parse_config(TWO_TABLES)
    # WHEN one is looked up by source name, table name or silver name
    # THEN the same table is found
    assert config.table(name).source == "public.hosts"


def test_table_lookup_unknown_name() -> None:
    # GIVEN two tables
    config = parse_config(TWO_TABLES)
    # WHEN an unknown name is looked up
    # THEN UnknownTableError lists the known tables
    with pytest.raises(UnknownTableError, match=re.escape("(known: public.hosts, sales.orders)")):
        config.table("nope")


def test_table_for_source_returns_none_for_unconfigured() -> None:
    # GIVEN two tables
    config = parse_config(TWO_TABLES)
    # WHEN a source that is not configured is looked up / THEN there is no table
    assert (config.table_for_source("sales", "orders").target, config.table_for_source("x", "y")) == ("orders", None)


# --------------------------------------------------------------------------- errors naming their line


def test_unknown_top_level_key() -> None:
    # GIVEN a misspelt top-level key on line 4
    message = config_error("tables:\n  s.t:\n    columns: {id: int}\nsilverr: {}\n")
    # THEN the error names the line and the key
    assert message.startswith("t.yaml, line 4: unknown key 'silverr' in the configuration")


def test_unknown_key_inside_a_table() -> None:
    # GIVEN an unknown key inside a table on line 4
    message = config_error("tables:\n  s.t:\n    columns: {id: int}\n    primary_keys: [id]\n")
    # THEN the error names the line, the key and the table
    assert message.startswith("t.yaml, line 4: unknown key 'primary_keys' in table s.t")


def test_unknown_type() -> None:
    # GIVEN a column of an unknown type on line 5
    message = config_error("tables:\n  s.t:\n    columns:\n      id: int\n      name: varchar\n")
    # THEN the error names the line, the column and the type
    assert message.startswith("t.yaml, line 5: type of column 'name': unknown type 'varchar'")


def test_bad_decimal() -> None:
    # GIVEN a decimal with more digits than Spark allows, on line 4
    message = config_error("tables:\n  s.t:\n    columns:\n      price: decimal(40,2)\n")
    # THEN the error names the line and the type
    assert message.startswith("t.yaml, line 4: type of column 'price': unknown type 'decimal(40,2)'")


def test_primary_key_not_in_columns() -> None:
    # GIVEN a key column missing from the column list, on line 3
    message = config_error("tables:\n  s.t:\n    primary_key: [id, nope]\n    columns: {id: int}\n")
    # THEN the error names the line and the missing column
    assert message == "t.yaml, line 3: primary key column(s) nope not in table s.t.columns"


def test_headerless_csv_table_without_columns() -> None:
    # GIVEN headerless CSV (the default) and a table without columns, its settings on line 3
    message = config_error("tables:\n  s.t:\n    primary_key: [id]\n")
    # THEN the error names the line and asks for columns
    assert message.startswith("t.yaml, line 3: table s.t needs 'columns'")


def test_headerless_csv_table_with_empty_settings() -> None:
    # GIVEN headerless CSV and a table with no settings at all, named on line 2
    message = config_error("tables:\n  s.t:\n")
    # THEN the error names the table's line
    assert message.startswith("t.yaml, line 2: table s.t needs 'columns'")


def test_append_only_with_primary_key() -> None:
    # GIVEN a table with both a key and append_only (line 4)
    message = config_error("tables:\n  s.t:\n    primary_key: [id]\n    append_only: true\n    columns: {id: int}\n")
    # THEN the error names the append_only line
    assert message == "t.yaml, line 4: table s.t has a primary key and append_only: choose one"


@pytest.mark.parametrize("name", ["hosts", "a.b.c"])
def test_table_name_must_be_schema_dot_table(name: str) -> None:
    # GIVEN a table name that is not schema.table, on line 2
    message = config_error(f"tables:\n  {name}:\n    columns: {{id: int}}\n")
    # THEN the error names the line and the name
    assert message == f"t.yaml, line 2: table '{name}' must be written as schema.table"


def test_names_dms_writes_are_accepted() -> None:
    # GIVEN schema, table and column names a source database and DMS allow: a hyphen, a space, a digit first
    config = parse_config(
        "tables:\n  inventory.order-items:\n    primary_key: [order-id]\n"
        "    columns: {order-id: int, unit price: 'decimal(10,2)', 9lives: string}\n",
        "t.yaml",
    )
    # THEN they are taken as they are, the silver table named after the source table
    table = config.tables[0]
    assert (table.source, table.target, table.primary_key) == ("inventory.order-items", "order-items", ("order-id",))
    assert list(table.columns) == ["order-id", "unit price", "9lives"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "tables:\n  inv:x.t:\n    columns: {id: int}\n",
            "t.yaml, line 2: table 'inv:x.t': 'inv:x' cannot be a schema or table name: "
            "the character ':' (position 4) is not allowed in a name",
        ),
        (
            "tables:\n  s.t:\n    columns: {a.b: int}\n",
            "t.yaml, line 3: column name 'a.b' in table s.t.columns is not valid: "
            "the character '.' (position 2) is not allowed in a name",
        ),
        (
            "tables:\n  s.t:\n    target: 'x/y'\n    columns: {id: int}\n",
            "t.yaml, line 3: table s.t.target 'x/y' is not a valid column or table name: "
            "the character '/' (position 2) is not allowed in a name",
        ),
    ],
)
def test_a_name_that_cannot_be_used_names_the_character(text: str, message: str) -> None:
    # GIVEN a name holding a character cdclake cannot use / THEN the error says which and where
    assert config_error(text) == message


def test_duplicate_silver_targets() -> None:
    # GIVEN two source tables writing to the same silver table
    message = config_error(
        "tables:\n  s.a:\n    target: t\n    columns: {id: int}\n  s.b:\n    target: t\n    columns: {id: int}\n"
    )
    # THEN the error names the line of the tables section and the shared target
    assert message == "t.yaml, line 2: several tables write to the same silver table: t"


def test_duplicate_targets_by_default_name() -> None:
    # GIVEN two schemas with a table of the same name and no explicit target
    message = config_error("tables:\n  a.t:\n    columns: {id: int}\n  b.t:\n    columns: {id: int}\n")
    # THEN they clash on the default silver name
    assert message == "t.yaml, line 2: several tables write to the same silver table: t"


def test_duplicate_key_inside_a_table() -> None:
    # GIVEN a table that sets columns twice (second time on line 4)
    message = config_error("tables:\n  s.t:\n    columns: {id: int}\n    columns: {id: int}\n")
    # THEN the error names the duplicate's line
    assert message.startswith("t.yaml, line 4: duplicate key 'columns' in table s.t")


def test_duplicate_source_table() -> None:
    # GIVEN the same source table listed twice with different targets (second time on line 5)
    text = "tables:\n  s.t:\n    target: a\n    columns: {id: int}\n  s.t:\n    target: b\n    columns: {id: int}\n"
    # THEN the duplicate is rejected like any other duplicate key, naming its line
    assert config_error(text).startswith("t.yaml, line 5: duplicate")


def test_bad_boolean() -> None:
    # GIVEN a boolean setting that is not a boolean (line 2)
    message = config_error("bronze:\n  csv_header: maybe\ntables:\n  s.t:\n    columns: {id: int}\n")
    # THEN the error names the line and the value
    assert message == "t.yaml, line 2: bronze.csv_header must be true or false, not 'maybe'"


def test_max_files_per_batch_must_be_positive() -> None:
    # GIVEN a batch size of zero (line 1)
    message = config_error("cdc: {max_files_per_batch: 0}\ntables:\n  s.t:\n    columns: {id: int}\n")
    # THEN the error names the line and the value
    assert message == "t.yaml, line 1: cdc.max_files_per_batch must be an integer >= 1, not '0'"


def test_max_files_per_batch_unicode_digit() -> None:
    # GIVEN a batch size written with a superscript digit (line 1)
    # THEN it is a ConfigError naming the line, like any other bad integer
    message = config_error("cdc: {max_files_per_batch: ²}\ntables:\n  s.t:\n    columns: {id: int}\n")
    assert message == "t.yaml, line 1: cdc.max_files_per_batch must be an integer >= 1, not '²'"


def test_tables_section_missing() -> None:
    # GIVEN a document without tables
    message = config_error("silver: {database: x}\n")
    # THEN the error names the first line
    assert message == "t.yaml, line 1: the configuration needs a 'tables' section"


def test_empty_document() -> None:
    # GIVEN a document with only a comment
    message = config_error("# nothing here\n")
    # THEN the error says the file is empty (there is no line to point at)
    assert message == "t.yaml is empty: it needs at least a 'tables' section."


def test_invalid_yaml_names_the_line() -> None:
    # GIVEN a mis-indented key on line 4
    message = config_error("tables:\n  s.t:\n    columns: {id: int}\n   bad: x\n")
    # THEN the error is one line naming the file, the line and column, and the parser's problem
    assert message == (
        "t.yaml, line 4, column 4: not valid YAML: expected <block end>, but found '<block mapping start>' "
        "(while parsing a block mapping)"
    )


def test_load_config_missing_file(tmp_path: Path) -> None:
    # GIVEN a path with no file
    missing = tmp_path / "missing.yaml"
    # WHEN it is loaded / THEN the error names the path
    with pytest.raises(ConfigError, match=re.escape(f"The configuration file {missing} does not exist.")):
        load_config(missing)


def test_load_config_names_the_file_in_errors(tmp_path: Path) -> None:
    # GIVEN a file with an unknown key on line 1
    path = tmp_path / "c.yaml"
    path.write_text("nope: 1\n", encoding="utf-8")
    # WHEN it is loaded / THEN the error starts with the file's path and the line
    with pytest.raises(ConfigError, match=re.escape(f"{path}, line 1: unknown key 'nope'")):
        load_config(path)


def test_layout_defaults_to_sorted_for_keyed_tables_and_is_checked() -> None:
    # GIVEN tables with and without a key, and an explicit layout
    config = parse_config(
        "bronze: {csv_header: true}\ntables:\n  s.a: {primary_key: [id]}\n  s.b: {append_only: true}\n"
        "  s.c: {primary_key: [id], layout: bucket}\n"
    )
    # THEN keyed tables are sorted by their key unless told otherwise; append-only ones are not clustered
    assert [t.layout for t in config.tables] == ["sorted", "none", "bucket"]
    # AND a wrong value or a layout without a key names its line
    with pytest.raises(ConfigError, match=r"line 3: table s\.a\.layout must be one of none, sorted, bucket"):
        parse_config("bronze: {csv_header: true}\ntables:\n  s.a: {primary_key: [id], layout: zorder}\n")
    with pytest.raises(ConfigError, match=r"line 3: table s\.b\.layout clusters by the primary key"):
        parse_config("bronze: {csv_header: true}\ntables:\n  s.b: {append_only: true, layout: sorted}\n")


def test_bronze_s3_settings_reach_the_client_and_are_checked() -> None:
    # GIVEN bronze.s3 settings
    config = parse_config(
        "bronze:\n  s3: {retry_mode: adaptive, max_attempts: 3, read_timeout_seconds: 2.5, body_attempts: 2}\n"
        "tables:\n  s.t:\n    columns: {id: int}\n"
    )
    # THEN they are the store's settings, the rest keep their defaults, and botocore gets them
    assert config.bronze.s3 == StoreSettings(
        retry_mode="adaptive", max_attempts=3, read_timeout_seconds=2.5, body_attempts=2
    )
    client = config.bronze.s3.client_config()
    assert (client.retries, client.read_timeout, client.connect_timeout) == (
        {"mode": "adaptive", "total_max_attempts": 3},
        2.5,
        10.0,
    )
    # AND without them, the defaults
    assert parse_config("tables:\n  s.t:\n    columns: {id: int}\n").bronze.s3 == StoreSettings()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("retry_mode: legacy", "bronze.s3.retry_mode must be standard or adaptive, not 'legacy'"),
        ("max_attempts: 0", "bronze.s3.max_attempts must be an integer >= 1, not '0'"),
        ("read_timeout_seconds: -1", "bronze.s3.read_timeout_seconds must be a number of seconds above 0, not '-1'"),
        ("connect_timeout_seconds: soon", "bronze.s3.connect_timeout_seconds must be a number of seconds above 0"),
        ("read_timeout_seconds: .nan", "bronze.s3.read_timeout_seconds must be a number of seconds above 0"),
        ("retries: 3", "unknown key 'retries' in bronze.s3"),
    ],
)
def test_bad_bronze_s3_settings_name_their_line(setting: str, message: str) -> None:
    text = f"bronze:\n  s3:\n    {setting}\ntables:\n  s.t:\n    columns: {{id: int}}\n"
    assert config_error(text).startswith(f"t.yaml, line 3: {message}")


def test_round_names_integer_and_decimal_columns_only() -> None:
    # GIVEN round on a declared decimal, a decimal cast and an integer; then on a text column
    text = """
tables:
  s.t:
    primary_key: [id]
    columns: {id: int, price: "decimal(10,2)", note: string}
    clean: {cast: {note: "decimal(6,1)"}, round: [price, note, id]}
"""
    # THEN the first parses; round on a string column (or an unknown one) names it and its line
    assert parse_config(text).tables[0].clean.round == ("price", "note", "id")
    bad = text.replace('cast: {note: "decimal(6,1)"}, ', "")
    assert config_error(bad) == (
        "t.yaml, line 6: table s.t.clean.round names 'note', which columns or cast do not declare as an "
        "integer or decimal type"
    )

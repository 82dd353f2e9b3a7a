"""The column type table is the one place a column type is described: each type round-trips from
the configuration's spelling through Spark and Arrow to the widening rules, each DMS type in the
table reads as its row, and a list of type names written anywhere else in the library is one of the
places named here."""

import ast
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
from pyspark.sql.types import DataType, DecimalType, _all_atomic_types

import cdclake
from cdclake.sources.catalog.dms_types import DmsType, spark_type
from cdclake.types import (
    BY_SPARK,
    COLUMN_TYPES,
    INTEGRAL_TYPES,
    SPARK_BY_DMS,
    ColumnType,
    compare_types,
    fraction_digits,
    normalise_type,
    types_table,
)


def _spark_type(simple: str) -> DataType:
    """PySpark's own type for a Spark type name (the table is not asked): its atomic types by their
    SQL names, a decimal with its parameters."""
    if simple.startswith("decimal("):
        precision, scale = simple[len("decimal(") : -1].split(",")
        return DecimalType(int(precision), int(scale))
    atomic = {}
    for kind in _all_atomic_types.values():
        try:
            atomic[kind().simpleString()] = kind
        except TypeError:  # a type with parameters (char, varchar): not a column type here
            continue
    return atomic[simple]()


def _configured(column_type: ColumnType) -> str:
    """How a configuration names the type (a decimal with its precision and scale)."""
    return "DECIMAL(10, 2)" if column_type.spark == "decimal" else column_type.spark.upper()


@pytest.mark.parametrize("column_type", COLUMN_TYPES, ids=lambda t: t.spark)
def test_each_type_round_trips_config_spark_arrow_widening(column_type: ColumnType) -> None:
    # GIVEN a row of the table, as a configuration spells it
    # WHEN it is normalised, made Arrow and read back as Spark
    spark = normalise_type(_configured(column_type))
    arrow = to_arrow_type(_spark_type(spark))
    back = from_arrow_type(arrow, prefer_timestamp_ntz=True)
    # THEN PySpark's own Arrow form of it is the row's, it reads back as the configured type, and it
    # takes its own values
    assert column_type.arrow == str(arrow).split("(")[0] or pa.type_for_alias(column_type.arrow) == arrow
    assert back.simpleString() == spark
    assert compare_types(spark, spark) == "same"
    assert all(normalise_type(alias) == column_type.spark for alias in column_type.aliases)


def test_the_table_covers_every_arrow_form_once() -> None:
    arrows = [t.arrow for t in COLUMN_TYPES]
    assert len(arrows) == len(set(arrows))
    assert len(BY_SPARK) == len(COLUMN_TYPES)


@pytest.mark.parametrize(("dms", "spark"), sorted(SPARK_BY_DMS.items()))
def test_each_dms_type_in_the_table_reads_as_its_row(dms: str, spark: str) -> None:
    # GIVEN / WHEN a DMS type the table names / THEN the source map reads it as that row, in both formats
    assert spark_type(DmsType(dms)) == spark == spark_type(DmsType(dms), "parquet")


def test_the_source_maps_parameterised_types_outside_the_table() -> None:
    assert spark_type(DmsType("UINT8")) == "decimal(20,0)"
    assert spark_type(DmsType("NUMERIC", 12, 3)) == "decimal(12,3)"
    assert spark_type(DmsType("NUMERIC", 40, 3)) == "string"
    assert spark_type(DmsType("DATETIME", utc_instant=True)) == "timestamp"
    assert spark_type(DmsType("DATETIME")) == "timestamp_ntz"
    assert (spark_type(DmsType("BLOB")), spark_type(DmsType("BLOB"), "parquet")) == ("string", "binary")


def test_integral_types_are_the_integral_family_and_store_no_fraction() -> None:
    family = {t.spark for t in COLUMN_TYPES if t.family == "integral"}
    assert set(INTEGRAL_TYPES) == family == {"tinyint", "smallint", "int", "bigint"}
    assert all(fraction_digits(name) == 0 for name in INTEGRAL_TYPES)
    assert (fraction_digits("decimal(12,3)"), fraction_digits("double")) == (3, None)


# (stored, incoming) pairs by what a column of the first type does with values of the second.
_CHANGES = {
    "widen": [("int", "bigint"), ("tinyint", "int"), ("float", "double"), ("decimal(10,2)", "decimal(12,2)")],
    "narrower": [("bigint", "int"), ("double", "float"), ("decimal(12,2)", "decimal(10,2)")],
    "incompatible": [
        ("decimal(10,2)", "decimal(12,3)"), ("int", "double"), ("int", "decimal(10,0)"), ("string", "int"),
        ("timestamp", "timestamp_ntz"), ("date", "timestamp"),
    ],
}  # fmt: skip


def test_widening_stays_in_a_family_and_only_widens() -> None:
    for verdict, pairs in _CHANGES.items():
        for stored, incoming in pairs:
            assert compare_types(stored, incoming) == verdict, (stored, incoming)


def test_widening_families_are_ranked_from_one() -> None:
    for family in {t.family for t in COLUMN_TYPES if t.family and t.family != "decimal"}:
        ranks = sorted(t.rank for t in COLUMN_TYPES if t.family == family)
        assert ranks == list(range(1, len(ranks) + 1))


# Every module of the library that writes a list of two or more type names, and why (types.py holds
# the table as rows, not lists). A new type is a row in types.py and its spellings in dms_types.py;
# the rest read the table. A new place here is a second copy of the table, unless it says something
# the table cannot.
_TYPE_LISTS = {
    "sources/catalog/dms_types.py": "source engines' own type names (MySQL's and SQL Server's match Spark's)",
    "verify/checksum.py": "verify's canonical text of each type (its kinds)",
    "verify/mysql/checksums.py": "MySQL's SQL of each kind of canonical text (kinds share names with types)",
    "verify/postgres/checksums.py": "PostgreSQL's SQL of each kind of canonical text (kinds share names with types)",
    "verify/sqlserver/checksums.py": "SQL Server's SQL of each kind of canonical text (kinds share names with types)",
}
_NAMES = {t.spark for t in COLUMN_TYPES} | {alias for t in COLUMN_TYPES for alias in t.aliases}


def _type_lists(tree: ast.AST) -> list[int]:
    """Lines of the tuples, lists, sets and dictionary keys that hold two or more type names."""
    lines = []
    for node in ast.walk(tree):
        items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if isinstance(node, ast.Dict | ast.Tuple | ast.List | ast.Set) and items:
            names = {i.value for i in items if isinstance(i, ast.Constant) and i.value in _NAMES}
            if len(names) >= 2:
                lines.append(node.lineno)
    return lines


def test_type_names_are_listed_only_in_the_named_places() -> None:
    # GIVEN the library's modules
    root = Path(cdclake.__file__).parent
    # WHEN each is searched for literal lists of type names
    found = {
        str(path.relative_to(root)): lines
        for path in sorted(root.rglob("*.py"))
        if (lines := _type_lists(ast.parse(path.read_text(encoding="utf-8"))))
    }
    # THEN they are the places named above, and each of those still holds one
    assert set(found) == set(_TYPE_LISTS), found


def test_the_docs_types_table_is_made_from_the_table() -> None:
    # GIVEN docs/configuration.md / WHEN its generated types table is cut out / THEN it is types_table(), a row a type
    text = (Path(cdclake.__file__).parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = text.split("<!-- generated: types -->\n", 1)[1].split("\n<!-- end generated: types -->", 1)[0]
    assert table == types_table()
    assert [line.split("`")[1] for line in table.splitlines()[2:]] == [
        "decimal(p,s)" if t.family == "decimal" else t.spark for t in COLUMN_TYPES
    ]

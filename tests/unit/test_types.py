"""The column type table is consistent: each type's Arrow form round-trips to the same Spark type,
the integral set is the integral family, and widening stays within a family and only widens."""

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type

from cdclake.config import fraction_digits
from cdclake.types import BY_SPARK, COLUMN_TYPES, INTEGRAL_TYPES, widens

_ARROW = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "decimal128": pa.decimal128(10, 2),
    "date32": pa.date32(),
    "timestamp[us, tz=UTC]": pa.timestamp("us", tz="UTC"),
    "timestamp[us]": pa.timestamp("us"),
    "string": pa.string(),
    "binary": pa.binary(),
}


def test_each_arrow_type_is_its_spark_type() -> None:
    for column_type in COLUMN_TYPES:
        spark = from_arrow_type(_ARROW[column_type.arrow], prefer_timestamp_ntz=True).simpleString().split("(")[0]
        assert spark == column_type.spark
    assert {t.arrow for t in COLUMN_TYPES} == set(_ARROW)


def test_spark_names_are_unique() -> None:
    assert len(BY_SPARK) == len(COLUMN_TYPES)


def test_integral_types_are_the_integral_family_and_store_no_fraction() -> None:
    family = {t.spark for t in COLUMN_TYPES if t.family == "integral"}
    assert set(INTEGRAL_TYPES) == family == {"tinyint", "smallint", "int", "bigint"}
    assert all(fraction_digits(name) == 0 for name in INTEGRAL_TYPES)


def test_widening_stays_in_a_family_and_only_widens() -> None:
    assert widens("int", "bigint") and widens("float", "double") and widens("int", "int")
    assert not widens("bigint", "int")
    assert not widens("int", "double")
    assert not widens("string", "int")
    for family in {t.family for t in COLUMN_TYPES if t.family}:
        ranks = sorted(t.rank for t in COLUMN_TYPES if t.family == family)
        assert ranks == list(range(1, len(ranks) + 1))

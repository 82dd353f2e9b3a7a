"""A mart refreshed group by group: whether its SQL allows it, and the groups a change affects.

``incremental_shape_problem`` reads the mart's analysed plan: its result must be a GROUP BY of the
mart's keys, so that every result row depends on its own group's source rows only.
``groups_and_key_ranges`` turns the affected groups into a count and a filter on the keys' ranges
that reaches the scan of silver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cdclake.identifiers import quote

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def incremental_shape_problem(frame: DataFrame, keys: Sequence[str]) -> str | None:
    """Why a mart's SQL cannot be refreshed group by group (None: it can).

    It can when its result is a GROUP BY whose grouping expressions produce the ``keys`` columns,
    with only projections passing the keys through (or an ORDER BY) above it: then every result
    row depends on the source rows of its own group only. HAVING, LIMIT, DISTINCT, window
    functions above the aggregate and grouping sets need a full recompute.
    """
    node: Any = frame._jdf.queryExecution().analyzed()
    wanted = {k.lower() for k in keys}
    while node.nodeName() in ("Project", "SubqueryAlias", "Sort"):
        if node.nodeName() == "Project":
            passed = {
                _seq(node.projectList())[i].name().lower()
                for i in range(node.projectList().size())
                if _seq(node.projectList())[i].nodeName() == "AttributeReference"
            }
            if not wanted <= passed:
                return "a key column is computed above the GROUP BY"
        node = node.child()
    if node.nodeName() != "Aggregate":
        return f"its SQL is not a GROUP BY of its keys ({_above_group_by(node)})"
    if node.child().nodeName() == "Expand":
        return "its SQL uses GROUPING SETS, ROLLUP or CUBE"
    grouping = _seq(node.groupingExpressions())
    outputs = {e.name().lower(): e for e in _seq(node.aggregateExpressions())}
    for key in keys:
        expression = outputs.get(key.lower())
        if expression is None:
            return f"key {key} is not a column of the GROUP BY's result"
        produced = expression.child() if expression.nodeName() == "Alias" else expression
        if not any(produced.semanticEquals(g) for g in grouping):
            return f"key {key} is not one of the GROUP BY expressions"
    return None


# Spark plan nodes that can stand above a GROUP BY, in the words of the SQL that makes them.
_SQL_WORDS = {
    "Filter": "WHERE",
    "GlobalLimit": "LIMIT",
    "LocalLimit": "LIMIT",
    "Offset": "OFFSET",
    "Distinct": "DISTINCT",
    "Deduplicate": "DISTINCT",
    "Window": "a window function (OVER)",
    "Union": "UNION",
    "Intersect": "INTERSECT",
    "Except": "EXCEPT",
    "Join": "a JOIN",
    "Generate": "LATERAL VIEW or explode",
    "Sample": "TABLESAMPLE",
    "RepartitionByExpression": "DISTRIBUTE BY or CLUSTER BY",
    "Repartition": "a REPARTITION hint",
}


def _above_group_by(node: Any) -> str:
    """What a mart's SQL does above its GROUP BY (or that it has none), as SQL says it."""
    if not _has_aggregate(node):
        return "it has no GROUP BY"
    name = node.nodeName()
    if name == "Filter" and node.child().nodeName() == "Aggregate":
        return "HAVING filters its groups"
    return f"{_SQL_WORDS.get(name, name)} above the GROUP BY"


def _has_aggregate(node: Any) -> bool:
    return node.nodeName() == "Aggregate" or any(_has_aggregate(c) for c in _seq(node.children()))


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def groups_and_key_ranges(affected: DataFrame, keys: Sequence[str]) -> tuple[int, Column | None]:
    """How many groups are affected, and a filter on each key's range over them (None: no key has
    an orderable type), from one Spark job over the affected groups.

    The recomputation's semi-join on the keys prunes no data file (Iceberg filters at run time on
    partition columns only); a filter of literals on the keys is pushed below the aggregation to
    the scan, where Iceberg skips the files whose min/max statistics lie outside: when silver is
    clustered by the mart's keys and the changes by key, the recomputation reads few files. The
    bounds travel as text cast back to the key's type, which Spark folds into a literal.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, DecimalType, IntegralType, StringType, TimestampNTZType, TimestampType

    types = {f.name.lower(): f.dataType for f in affected.schema.fields}
    ranged = (IntegralType, StringType, DateType, TimestampType, TimestampNTZType, DecimalType)
    orderable = [k for k in keys if isinstance(types[k.lower()], ranged)]
    measures = [F.count(F.lit(1)).alias("groups")]
    for i, key in enumerate(orderable):
        column = F.col(quote(key))
        measures += [
            F.min(column).cast("string").alias(f"lo_{i}"),
            F.max(column).cast("string").alias(f"hi_{i}"),
            F.count(column).alias(f"known_{i}"),
        ]
    bounds = affected.agg(*measures).first()
    assert bounds is not None, "an aggregate without grouping returns one row"
    condition: Column | None = None
    for i, key in enumerate(orderable):
        column, key_type = F.col(quote(key)), types[key.lower()]
        low, high = bounds[f"lo_{i}"], bounds[f"hi_{i}"]
        in_range = (
            column.isNull() if low is None else column.between(F.lit(low).cast(key_type), F.lit(high).cast(key_type))
        )
        if low is not None and bounds[f"known_{i}"] < bounds["groups"]:  # a NULL key among them
            in_range = in_range | column.isNull()
        condition = in_range if condition is None else condition & in_range
    return int(bounds["groups"]), condition

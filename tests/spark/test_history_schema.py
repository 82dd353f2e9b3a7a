"""Property: history follows every schema change silver follows.

A random sequence of CDC batches, some of them changing the source schema first (a column added,
int -> bigint, float -> double, decimal(10,2) -> decimal(14,2), a column dropped at the source),
each batch with values that need the wider type once a column is widened. After the load and after
each batch, history's current rows equal silver (same columns, same types, same values), and
silver equals the source state replayed in plain Python. The example count is small for CI; raise
it with CDCLAKE_PROPERTY_EXAMPLES=50 for a long run.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.dms.store import LocalBronze
from cdclake.dms.writer import SourceChange
from cdclake.engine.run import run
from oracle import replay_change_log
from property_settings import property_settings

CONFIG = """
bronze: {{format: parquet, timestamp_column: ts}}
silver: {{database: {db}}}
tables:
  s.items: {{primary_key: [id], history: true}}
"""
SCHEMA_CHANGES = ("widen qty", "widen price", "widen amount", "add extra", "drop note")
KEYS = 4


@st.composite
def sequences(draw: st.DrawFn) -> list[tuple[str | None, list[tuple[int, str]]]]:
    """Batches: (the schema change the source makes before it, or None; its (key, op) changes)."""
    change = st.tuples(st.integers(0, KEYS - 1), st.sampled_from("IUD"))
    batch = st.tuples(st.one_of(st.none(), st.sampled_from(SCHEMA_CHANGES)), st.lists(change, min_size=1, max_size=4))
    return draw(st.lists(batch, min_size=1, max_size=5))


def _types(changed: set[str]) -> dict[str, pa.DataType | None]:
    """The source's columns (after the ``changed`` schema changes) and their Parquet types."""
    return {
        "qty": pa.int64() if "widen qty" in changed else pa.int32(),
        "price": pa.float64() if "widen price" in changed else pa.float32(),
        "amount": pa.decimal128(14, 2) if "widen amount" in changed else pa.decimal128(10, 2),
        "note": None if "drop note" in changed else pa.string(),
        "extra": pa.string() if "add extra" in changed else None,
    }


def _row(ident: int, n: int, changed: set[str]) -> dict[str, Any]:
    """A source row whose values need the wider type wherever the column was widened."""
    row: dict[str, Any] = {
        "id": ident,
        "qty": 3_000_000_000 + n if "widen qty" in changed else n,
        "price": n + 0.1 if "widen price" in changed else n + 0.5,  # 0.1: not a float32
        "amount": Decimal(f"{10**11 + n}.25") if "widen amount" in changed else Decimal(f"{n}.25"),
    }
    if "drop note" not in changed:
        row["note"] = f"n{n}"
    if "add extra" in changed:
        row["extra"] = f"x{n}"
    return row


def _ts(second: int) -> str:
    return f"2024-01-02 00:{second // 60:02d}:{second % 60:02d}.000000"


def _write(bronze: Path, key: str, changes: list[SourceChange], changed: set[str], with_op: bool) -> None:
    columns: dict[str, pa.Array] = {"Op": pa.array([c.op for c in changes])} if with_op else {}
    columns |= {
        "ts": pa.array([c.commit_ts for c in changes]),
        "id": pa.array([c.row["id"] for c in changes], pa.int32()),
    }
    for name, type_ in _types(changed).items():
        if type_ is not None:
            columns[name] = pa.array([c.row.get(name) for c in changes], type_)
    path = bronze / key
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def _silver_and_current_history(spark: SparkSession, db: str) -> tuple[list, list, list, list]:
    """Silver's (name, type) columns and rows, and the same of history's current rows."""
    silver = spark.table(f"silver.{db}.items").drop("_cdc_order")
    current = spark.table(f"silver.{db}.items__history").where("is_current").select(*silver.columns)
    return (
        silver.dtypes,
        sorted(tuple(r) for r in silver.collect()),
        current.dtypes,
        sorted(tuple(r) for r in current.collect()),
    )


def _source(spark: SparkSession, db: str, initial: list[dict], log: list[SourceChange]) -> tuple[dict, dict]:
    """Silver and the replayed source state, by key, over the source's columns (a column never sent: None)."""
    names = ["qty", "price", "amount", "note", "extra"]
    state = replay_change_log(initial, log, ["id"])
    expected = {k: tuple(row.get(n) for n in names) for k, row in state.items()}
    silver = spark.table(f"silver.{db}.items")
    stored = {(r["id"],): tuple(r[n] if n in silver.columns else None for n in names) for r in silver.collect()}
    return stored, expected


@property_settings(2, [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sequence=sequences())
# Always run: every schema change once, the widening case first (int -> bigint, then an update and an
# insert that need the wider type).
@example(
    sequence=[
        ("widen qty", [(0, "U"), (3, "I")]),
        ("widen price", [(1, "U")]),
        ("add extra", [(0, "U")]),
        ("drop note", [(2, "D"), (3, "U")]),
        ("widen amount", [(0, "U"), (2, "I")]),
    ]
)
def test_history_current_rows_equal_silver_through_schema_changes(
    spark: SparkSession, tmp_path: Path, sequence: list[tuple[str | None, list[tuple[int, str]]]]
) -> None:
    # GIVEN a table with history, loaded with rows of the narrow types
    db = f"h_{uuid.uuid4().hex[:10]}"
    bronze = tmp_path / uuid.uuid4().hex
    engine = Engine(spark, parse_config(CONFIG.format(db=db)), LocalBronze(bronze))
    changed: set[str] = set()
    initial = [_row(i, i, changed) for i in range(KEYS - 1)]
    load = [SourceChange("I", row, _ts(0), "") for row in initial]
    _write(bronze, "s/items/LOAD00000001.parquet", load, changed, with_op=False)
    run(engine).checked()
    silver_types, silver_rows, history_types, history_rows = _silver_and_current_history(spark, db)
    assert (history_types, history_rows) == (silver_types, silver_rows), "after the load"
    live, log, n = {row["id"] for row in initial}, [], 0
    for number, (schema_change, changes) in enumerate(sequence):
        # WHEN the source changes its schema (or not), then a batch of changes is applied
        if schema_change is not None:
            changed.add(schema_change)
        batch = []
        for ident, op in changes:
            n += 1
            op = ("D" if op == "D" else "U") if ident in live else "I"  # a valid history at the source
            live.discard(ident) if op == "D" else live.add(ident)
            batch.append(SourceChange(op, _row(ident, n, changed), _ts(n), ""))
        log += batch
        _write(bronze, f"s/items/20240102-{number + 1:010d}.parquet", batch, changed, with_op=True)
        run(engine).checked()
        # THEN history's current rows equal silver: the same columns, types and values
        silver_types, silver_rows, history_types, history_rows = _silver_and_current_history(spark, db)
        step = f"after batch {number} ({schema_change})"
        assert history_types == silver_types, step
        assert history_rows == silver_rows, step
        # AND silver equals the source replayed in plain Python (nothing wrapped on either side)
        stored, expected = _source(spark, db, initial, log)
        assert stored == expected, step

"""`history: true` turned on after a table was loaded.

History starts from silver's rows as the next batch finds them, valid from the moment it starts,
before that batch's changes; `status` says since when. Before, history held only the keys changed
from then on: rows that never changed again had no version at all, and nothing said so.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.dms.store import LocalBronze
from cdclake.engine.run import run
from cdclake.ops.status import table_statuses

CONFIG = """
bronze: {{format: parquet, timestamp_column: ts}}
silver: {{database: {db}}}
tables:
  s.items: {{primary_key: [id]{history}}}
"""


def _write(bronze: Path, key: str, rows: list[tuple[str, int, int]], second: int) -> None:
    """A Parquet bronze file of (Op, id, qty) rows, committed at ``second`` (no Op column: a LOAD file)."""
    columns: dict[str, pa.Array] = (
        {} if key.split("/")[-1].startswith("LOAD") else {"Op": pa.array([r[0] for r in rows])}
    )
    columns |= {
        "ts": pa.array([f"2024-01-02 00:00:{second:02d}.000000"] * len(rows)),
        "id": pa.array([r[1] for r in rows], pa.int32()),
        "qty": pa.array([r[2] for r in rows], pa.int32()),
    }
    path = bronze / key
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def test_history_turned_on_after_the_load_starts_from_silver(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN a table loaded and changed without history
    db, bronze = f"hs_{uuid.uuid4().hex[:10]}", tmp_path / "bronze"
    without = Engine(spark, parse_config(CONFIG.format(db=db, history="")), LocalBronze(bronze))
    _write(bronze, "s/items/LOAD00000001.parquet", [("I", 1, 10), ("I", 2, 20), ("I", 3, 30)], 0)
    run(without).checked()
    _write(bronze, "s/items/20240102-0000000001.parquet", [("U", 1, 11)], 1)
    run(without).checked()
    # WHEN `history: true` is turned on: status before the next batch, then a batch that updates
    # one key and inserts another
    engine = Engine(spark, parse_config(CONFIG.format(db=db, history=", history: true")), LocalBronze(bronze))
    (waiting,) = table_statuses(engine)
    _write(bronze, "s/items/20240102-0000000002.parquet", [("U", 2, 21), ("I", 4, 40)], 2)
    run(engine).checked()
    # THEN history holds a version of every row silver held (1, 2 and 3: 1 and 3 never change
    # again), valid from the batch's first source commit (on the source's clock, as every version),
    # then the batch's changes
    history = f"silver.{db}.items__history"
    (status,) = table_statuses(engine)
    prefix = "history since "
    assert status.history_note.startswith(prefix), status.history_note
    since = status.history_note[len(prefix) :].split(" ")[0]
    assert datetime.fromisoformat(since) == datetime(2024, 1, 2, 0, 0, 2, tzinfo=UTC)
    versions = spark.sql(
        f"SELECT id, qty, operation, valid_from = CAST('{since}' AS TIMESTAMP) AS from_start, is_current FROM {history}"
    ).collect()
    assert sorted(tuple(v) for v in versions) == [
        (1, 11, "I", True, True),
        (2, 20, "I", True, False),
        (2, 21, "U", True, True),
        (3, 30, "I", True, True),
        (4, 40, "I", True, True),
    ]
    # AND no version ends before it starts (a start on the wall clock would end key 2's first one so)
    assert spark.sql(f"SELECT count(*) FROM {history} WHERE valid_to < valid_from").first()[0] == 0
    # AND history's current rows equal silver
    silver = spark.table(f"silver.{db}.items").drop("_cdc_order")
    current = spark.table(history).where("is_current").select(*silver.columns)
    assert sorted(tuple(r) for r in current.collect()) == sorted(tuple(r) for r in silver.collect())
    # AND status said, before the batch, that history had not started, and says since when after it
    assert waiting.history_note == "history not started: starts from silver's rows with the next batch"
    assert status.history_note == f"history since {since} (started from silver's rows; no versions before)"
    # AND a later batch does not start it again
    _write(bronze, "s/items/20240102-0000000003.parquet", [("U", 3, 31)], 3)
    run(engine).checked()
    assert spark.table(history).count() == 6
    (later,) = table_statuses(engine)
    assert later.history_note == status.history_note

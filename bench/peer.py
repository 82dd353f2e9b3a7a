# pyarrow ships no type information:
# mypy: disable-error-code="import-untyped"
"""The peer: what a user without Spark would pick, pyiceberg's ``Table.upsert`` (Arrow in one process).

The same base rows as cdclake's table (the benchmark's typed Parquet LOAD files) go into a pyiceberg
table in a SQLite-backed ``SqlCatalog`` under a temporary directory; the same CDC files are then
applied in ONE transaction: ``Transaction.delete`` of the deleted keys (``upsert`` has no delete
clause) and ``Transaction.upsert`` of the updated and inserted rows (joined on ``id``). The timed
step starts from the CDC files on disk, as cdclake's does: reading and parsing the CSV is included.

What the peer does not do, and cdclake does: order changes by ``AR_H_CHANGE_SEQ`` (pyiceberg's upsert
refuses a key twice in one batch; the benchmark's change sets touch each key once, so nothing is
de-duplicated here), the late-change guard, tombstones, the exactly-once ledger, quarantine and
schema evolution. pyiceberg writes copy-on-write: the files holding a changed key are rewritten.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import generate as gen

if TYPE_CHECKING:
    from pyiceberg.table import Table

ORDER_COLUMN = "_cdc_order"  # the change sequence, as in cdclake's silver rows


@dataclass(frozen=True)
class PeerResult:
    rows: int
    amount_total: str  # sum(amount) of the table afterwards, text (compared with cdclake's table)
    deleted: int
    updated: int
    inserted: int


def _arrow_schema() -> Any:
    import pyarrow as pa

    types = {
        "bigint": pa.int64(),
        "int": pa.int32(),
        "string": pa.string(),
        "decimal(12,2)": pa.decimal128(12, 2),
        "date": pa.date32(),
    }
    fields = [pa.field(gen.TIMESTAMP_COLUMN, pa.timestamp("us"))]
    fields += [pa.field(name, types[kind], nullable=name != "id") for name, kind in gen.COLUMNS.items()]
    fields.append(pa.field(ORDER_COLUMN, pa.string()))
    return pa.schema(fields)


def _typed(frame: Any) -> Any:
    """DMS text (or half-typed Parquet) columns -> the peer table's Arrow schema."""
    import pyarrow as pa

    schema = _arrow_schema()
    columns = [frame.column(gen.TIMESTAMP_COLUMN).cast(schema.field(gen.TIMESTAMP_COLUMN).type)]  # ISO-8601 text
    for name in gen.COLUMNS:
        columns.append(frame.column(name).cast(schema.field(name).type))
    columns.append(frame.column(gen.SEQ_COLUMN).cast(schema.field(ORDER_COLUMN).type))
    return pa.Table.from_arrays(columns, schema=schema)


def read_load(files: Sequence[Path]) -> Any:
    """The typed Parquet LOAD files as one Arrow table in the peer's schema."""
    import pyarrow.parquet as pq

    return _typed(pq.read_table([str(f) for f in files]))


def read_changes(files: Sequence[Path]) -> tuple[Any, Any]:
    """DMS CSV change files -> (deleted keys, rows to upsert) in the peer's schema."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyarrow import csv

    names = ["Op", gen.TIMESTAMP_COLUMN, *gen.COLUMNS, gen.SEQ_COLUMN]
    read = csv.ReadOptions(column_names=names)
    convert = csv.ConvertOptions(
        column_types={n: pa.string() for n in names}, null_values=[""], strings_can_be_null=True
    )
    parse = csv.ParseOptions(newlines_in_values=True)
    frame = pa.concat_tables(
        [csv.read_csv(str(f), read_options=read, parse_options=parse, convert_options=convert) for f in files]
    )
    deletes = frame.filter(pc.equal(frame.column("Op"), "D"))
    upserts = frame.filter(pc.not_equal(frame.column("Op"), "D"))
    return deletes.column("id").cast(pa.int64()), _typed(upserts)


class Peer:
    """A pyiceberg table in a throw-away SQLite catalog."""

    def __init__(self, parent: Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        self.dir = Path(tempfile.mkdtemp(prefix="pyiceberg-", dir=parent))
        self.catalog = SqlCatalog(
            "peer", uri=f"sqlite:///{self.dir / 'catalog.db'}", warehouse=(self.dir / "warehouse").as_uri()
        )
        self.catalog.create_namespace("bench")

    def create(self, name: str, base: Any) -> Table:
        """A fresh table holding ``base`` (dropped first if present)."""
        identifier = f"bench.{name}"
        if self.catalog.table_exists(identifier):
            self.catalog.purge_table(identifier)
        table = self.catalog.create_table(identifier, schema=base.schema)
        table.append(base)
        return table

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def apply(table: Table, change_files: Sequence[Path]) -> tuple[int, int, int]:
    """Read the change files and apply them in one transaction: delete, then upsert. Returns
    (deleted keys, rows updated, rows inserted)."""
    from pyiceberg.expressions import In

    deleted, upserts = read_changes(change_files)
    with table.transaction() as tx:
        if len(deleted):
            # In's __new__ takes (term, literals); mypy sees pydantic's field signature instead.
            tx.delete(In("id", deleted.to_pylist()))  # type: ignore[call-arg, arg-type]
        result = tx.upsert(upserts, join_cols=["id"])
    return len(deleted), result.rows_updated, result.rows_inserted


def summary(table: Table) -> tuple[int, str]:
    """Row count and sum(amount) of the table's current snapshot."""
    import pyarrow.compute as pc

    frame = table.scan(selected_fields=("amount",)).to_arrow()
    return frame.num_rows, str(pc.sum(frame.column("amount")).as_py())

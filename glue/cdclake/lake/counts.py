"""Row counts and distinct-key counts of Iceberg tables read in this process by pyiceberg, with no
Spark job: ``status`` on a local warehouse, where the tables are small and the first Spark job of a
command costs seconds (a cold JVM plans and compiles one scan per table).

pyiceberg applies position delete files as the Iceberg spec says (a delete names a data file and a
row position; one for a removed data file applies to nothing), so the counts are exact. A table
with equality delete files, or one not on the local file system, is counted by Spark instead
(``counted_here``).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from cdclake.lake.iceberg import IcebergTable

FILE_IO = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}  # local files (named: pyiceberg logs a guess)


@dataclass(frozen=True)
class TableFiles:
    """Where an Iceberg table's current metadata is, and whether pyiceberg can count it here."""

    metadata_location: str
    first_column: str  # read from the data files delete files apply to, to count their live rows
    counted_here: bool


def table_files(iceberg: IcebergTable) -> TableFiles:
    """``TableFiles`` of a table (its metadata as loaded: refresh it first)."""
    location = iceberg.metadata_location
    snapshot = iceberg.current(("total-equality-deletes",))
    equality = 0 if snapshot is None else int(snapshot.summary.get("total-equality-deletes") or 0)
    return TableFiles(location, iceberg.first_column, urlparse(location).scheme in ("", "file") and equality == 0)


def live_rows(files: TableFiles) -> int:
    """The live rows of the table: data files' record counts, and one column read from those that
    delete files apply to."""
    from pyiceberg.table import StaticTable

    scan = StaticTable.from_metadata(files.metadata_location, FILE_IO).scan(selected_fields=(files.first_column,))
    return int(scan.count())


def distinct_keys(files: TableFiles, key: Sequence[str]) -> int:
    """How many distinct values of the ``key`` columns the table's live rows hold."""
    from pyiceberg.table import StaticTable

    keys = StaticTable.from_metadata(files.metadata_location, FILE_IO).scan(selected_fields=tuple(key)).to_arrow()
    return int(keys.group_by(list(key)).aggregate([]).num_rows)


@dataclass(frozen=True)
class Count:
    """One count a status needs: a table's live rows, or (with ``key``) how many distinct values of
    its ``key`` columns its live rows hold."""

    files: TableFiles
    key: tuple[str, ...] = ()


def counted(count: Count) -> int:
    return distinct_keys(count.files, count.key) if count.key else live_rows(count.files)


# Below this many counts a pool costs more than it saves.
_POOL_FROM = 8


def count_all(counts: Sequence[Count], pool_from: int = _POOL_FROM) -> list[int]:
    """Each of ``counts``, in order. pyiceberg decodes manifests and applies deletes in Python,
    holding the GIL, so threads do not overlap the work: on Linux, with several counts, it runs in
    forked processes, one a core up to 4 (pyiceberg makes its thread pool anew in a forked process;
    a fork costs milliseconds where a spawned process would import pyiceberg again). ``pool_from``:
    the fewest counts worth a pool."""
    workers = min(os.cpu_count() or 1, 4, max(2, len(counts) // 4))
    if workers < 2 or len(counts) < pool_from or sys.platform != "linux":
        return [counted(c) for c in counts]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(counted, counts, chunksize=max(1, len(counts) // (workers * 4))))

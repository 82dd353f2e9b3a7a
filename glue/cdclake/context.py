"""What every stage is handed: the Spark session, the configuration, bronze and the silver catalog.

Built once by a shell (Glue job, CLI, tests) and passed down; nothing below reads the environment.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cdclake.config import DEFAULT_CATALOG, PipelineConfig, TableConfig
from cdclake.dms.store import BronzeStore, open_store
from cdclake.lake.batch import CommitWay
from cdclake.lake.committer import IcebergCommitter
from cdclake.lake.tables import SilverTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdclake.runtime.session import GlueCatalog, LocalCatalog

# The setting: "auto" (``engine.commit_way.choose_commit_way`` decides per batch) or one way pinned.
CommitPath = Literal["auto"] | CommitWay

# How often a long Spark action (a full load's scan) logs how far it is, by default: plain log lines
# every 30 s at most (the CLI's terminal bar moves faster).
LOG_PROGRESS_SECONDS = 30.0


@dataclass(frozen=True)
class BatchSizes:
    """Where a batch's work changes its way, by its size (each default measured: docs/benchmarks.md)."""

    # Up to this many bytes of change files, a batch's keys are broadcast to pick the stored rows
    # they touch (a few tens of MB of keys at most: well within a 2 GB driver).
    broadcast_batch_bytes: int = 128 * 1024 * 1024
    # ... and only while the stored rows it touches fit this share of the driver's heap, shared by
    # the tables in flight (``engine.commit_way.broadcast_fits``); a larger batch shuffles instead.
    broadcast_heap_share: float = 0.25
    # A batch of one file up to ``broadcast_batch_bytes``, or of files up to this many bytes in
    # all, is read, de-duplicated and classified in one task: no shuffle (a single file is read by
    # one task anyway; a few small ones read in about a second).
    single_task_batch_bytes: int = 8 * 1024 * 1024
    # A full load of up to this many rows checks for repeated keys in one task (a window over one
    # sorted partition: one Spark job); a larger one shuffles the keys (``engine.full_load``).
    one_task_keys: int = 500_000
    # A batch that takes the RowDelta path with files up to this many bytes in all is collected
    # into the driver once and its files are written there (``lake.driver_write``): no Spark job
    # for its new images, position deletes and tombstones. 0: Spark writes every batch's files.
    driver_write_bytes: int = 8 * 1024 * 1024
    # A keyed CDC batch of files up to this many bytes in all is read and classified in the driver
    # (``engine.driver_batch``): one Spark job, for the stored rows of its keys. 0: never.
    driver_read_bytes: int = 1024 * 1024
    # A CDC batch of files up to this many bytes in all is prepared with Spark's interpreted
    # expressions (``runtime.session.interpreted_expressions``): up to about ten thousand changes,
    # generating code for the typing and checks costs more than it saves. 0: generated code always.
    interpreted_batch_bytes: int = 1024 * 1024
    # On the fallback: keyed silver tables with fewer stored records than this take a batch as one
    # MERGE (its join with every stored row costs less than staging on a branch); larger ones the
    # branch-staged RowDelta, whose cost follows the batch (docs/benchmarks.md).
    merge_below_records: int = 2_000_000


@dataclass(frozen=True)
class CommitPolicy:
    """How a keyed batch is committed, and how often a commit that lost a race is tried again."""

    # How a keyed batch is committed: "auto" writes its files and commits one RowDelta
    # (``lake.row_delta``: no scan of the table) where the table allows it, else takes the MERGE
    # or the branch-staged path by size; "row-delta", "merge" and "publish" pin a path (tests,
    # benchmarks; "row-delta" still falls back where the table does not allow it).
    way: CommitPath = "auto"
    # A batch whose commit loses a race with another writer is retried this many times in all,
    # after pauses of about 1, 2, 4 ... times ``backoff_seconds``.
    attempts: int = 4
    backoff_seconds: float = 1.0


@dataclass(frozen=True)
class Engine:
    """Everything the engine needs. ``committer`` makes the data commits (a seam for fault tests)."""

    spark: SparkSession
    config: PipelineConfig
    store: BronzeStore
    catalog: str = DEFAULT_CATALOG
    committer: IcebergCommitter = field(default_factory=lambda: IcebergCommitter())
    sizes: BatchSizes = BatchSizes()  # where a batch's work changes its way, by its size
    commits: CommitPolicy = CommitPolicy()  # how a keyed batch is committed, and retried
    # How often a long Spark action (a full load's scan) logs how far it is; 0: never.
    progress_seconds: float = LOG_PROGRESS_SECONDS
    # Set when the run is to stop (Ctrl-C): no table starts or takes another batch, and a Spark
    # action that fails because its job was cancelled is not retried another way (nothing held,
    # no careful path): the failure is the stop, not the data's.
    stopping: threading.Event = field(default_factory=threading.Event, compare=False)

    @property
    def parallel_tables(self) -> int:
        """How many tables of a run are worked on at once: ``cdc.parallel_tables``, else as many as
        Spark's default parallelism (the executors' cores; ``local[*]``: the shuffle partitions),
        from 2 to 8. A small table's batch is mostly the driver's bookkeeping and waits on commits,
        so even two cores gain from two tables at once; more than 8 mostly adds driver load."""
        if self.config.parallel_tables is not None:
            return self.config.parallel_tables
        return min(8, max(2, int(self.spark.sparkContext.defaultParallelism)))

    def tuned(self, **knobs: Any) -> Engine:
        """A copy with some knobs set (tests and benchmarks): each a field of ``BatchSizes``, of
        ``CommitPolicy`` or of the engine itself."""
        sizes = {k: v for k, v in knobs.items() if k in _SIZE_FIELDS}
        commits = {k: v for k, v in knobs.items() if k in _COMMIT_FIELDS}
        rest = {k: v for k, v in knobs.items() if k not in sizes and k not in commits}
        return replace(self, sizes=replace(self.sizes, **sizes), commits=replace(self.commits, **commits), **rest)

    def silver_table(self, table: TableConfig) -> SilverTable:
        return SilverTable(self.catalog, self.config.database, table.target)


def open_engine(
    config: PipelineConfig,
    catalog: LocalCatalog | GlueCatalog,
    catalog_name: str = DEFAULT_CATALOG,
    staging_dir: Path | None = None,
    progress_seconds: float = LOG_PROGRESS_SECONDS,
) -> Engine:
    """The one way a shell builds its engine: the Spark session for ``catalog`` (the Glue Data
    Catalog on S3, or a local Hadoop catalog), bronze at ``config.bronze.path`` (``staging_dir``:
    where S3 objects Spark cannot read directly are staged), every other knob at its default."""
    from cdclake.runtime.session import SessionSettings, build_spark_session

    spark = build_spark_session(SessionSettings(catalog=catalog, catalog_name=catalog_name))
    store = open_store(config.bronze.path, staging_dir, settings=config.bronze.s3)
    return Engine(spark=spark, config=config, store=store, catalog=catalog_name, progress_seconds=progress_seconds)


_SIZE_FIELDS = frozenset(f.name for f in fields(BatchSizes))
_COMMIT_FIELDS = frozenset(f.name for f in fields(CommitPolicy))

"""One Spark session factory for both shells: AWS Glue (Glue Data Catalog + S3) and local.

Only the catalog differs between the two; everything downstream addresses tables as
``<catalog>.<database>.<table>`` and never asks where it runs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.config import DEFAULT_CATALOG
from cdclake.runtime.iceberg import require_java, resolve_iceberg_runtime

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Spark's JVM logs errors only (no start-up notices): cdclake's own lines are the output.
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# Above any spark.sql.files.maxPartitionBytes: every bronze file (or split) in a partition of its own.
OPEN_COST_BYTES = 1 << 34


# Names PySpark and the engine look up in the JVM on every batch of every table. py4j resolves each
# hop of ``jvm.a.b.C`` with a round trip in which the JVM tries the name against every imported
# package, each miss a class-loader search through every jar: about 400 such lookups per table and
# batch, a millisecond each on 2 busy cores. Resolved once and kept on the session's JVM view
# (``pin_jvm_names``), they cost nothing after. py4j's class and member handles keep no state
# between calls, so one handle serves every thread.
JVM_NAMES = (
    "functions",  # every pyspark.sql.functions call
    # ... and the functions called most (a static method is one more round trip to look up)
    *(f"functions.{name}" for name in ("col", "lit", "expr", "when", "coalesce", "count_if", "struct", "max")),
    "PythonUtils.toSeq",
    "py4j.reflection.TypeUtil.isInstanceOf",
    "PythonSQLUtils",
    "SparkSession",
    "py4j.reflection.TypeUtil",
    "java.util.ArrayList",
    "java.util.HashMap",
    "java.lang.Runtime",
    "org.apache.spark.sql.Observation",
    "org.apache.spark.sql.types.Metadata",
    "org.apache.spark.util.Utils",
    "org.apache.iceberg.spark.Spark3Util",
    "org.apache.iceberg.spark.CommitMetadata",
    "org.apache.iceberg.SchemaParser",
    "org.apache.iceberg.MetricsConfig",
    "org.apache.iceberg.FileFormat",
    "org.apache.iceberg.FileMetadata",
    "org.apache.iceberg.DataFiles",
    "org.apache.iceberg.parquet.ParquetUtil",
    "org.apache.iceberg.expressions.Expressions",
)


def pin_jvm_names(jvm: Any, names: tuple[str, ...] = JVM_NAMES) -> None:
    """Resolve ``names`` (each hop of each) once and keep them as attributes of the JVM view
    ``jvm`` and its packages: an attribute found on the object skips py4j's lookup."""
    for name in names:
        node = jvm
        for part in name.split("."):
            child = getattr(node, part)
            setattr(node, part, child)
            node = child


@dataclass(frozen=True)
class LocalCatalog:
    """An Iceberg Hadoop catalog on a local warehouse directory, for laptops and tests."""

    warehouse: Path
    cache_dir: Path
    runtime_jar: Path | None = None  # an official iceberg-spark-runtime jar instead of the PyPI one
    maven_packages: tuple[str, ...] = ()  # e.g. org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0
    cores: str = "*"
    shuffle_partitions: int = 4
    driver_memory: str = "2g"
    # More options of the driver JVM, e.g. "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC": a short command on
    # small tables starts and plans about twice as fast with the JIT's first tier alone (the tests' setting;
    # a large load runs faster with the default)
    jvm_options: str = ""


@dataclass(frozen=True)
class GlueCatalog:
    """The AWS Glue Data Catalog as the Iceberg catalog, data files on S3 through S3FileIO."""

    warehouse: str  # s3://bucket/prefix


@dataclass(frozen=True)
class SessionSettings:
    catalog: LocalCatalog | GlueCatalog
    catalog_name: str = DEFAULT_CATALOG
    app_name: str = "cdclake"
    extra_conf: dict[str, str] = field(default_factory=dict)


# Spark's setting for how its expression evaluators are made: generated code (falling back to the
# interpreter when code does not compile) or, with NO_CODEGEN, always the interpreter.
CODEGEN_FACTORY_MODE = "spark.sql.codegen.factoryMode"


@contextmanager
def interpreted_expressions(spark: SparkSession) -> Iterator[None]:
    """Spark jobs started by this thread inside the block evaluate the expressions outside
    whole-stage code with the interpreter, not generated code (restored on leaving).

    A change row's typing and checks are too big for whole-stage code (``hugeMethodLimit``), so
    each task generates a projection per step; for a few hundred rows that took half the CPU of a
    small batch's tasks (docs/benchmarks.md). The mode is a local property of the calling thread,
    like a job group: tasks read it from their job (executors included), other threads' tables
    keep generated code. Query plans are unchanged (whole-stage code is chosen when planning,
    from the session's settings); the interpreter is Spark's reference evaluation, so results do
    not change either.
    """
    context = spark.sparkContext
    previous = context.getLocalProperty(CODEGEN_FACTORY_MODE)
    context.setLocalProperty(CODEGEN_FACTORY_MODE, "NO_CODEGEN")
    try:
        yield
    finally:
        context.setLocalProperty(CODEGEN_FACTORY_MODE, previous)  # type: ignore[arg-type]


def spark_conf(settings: SessionSettings) -> dict[str, str]:
    """The Spark configuration for ``settings``; pure, so both shells' settings are testable."""
    prefix = f"spark.sql.catalog.{settings.catalog_name}"
    catalog = settings.catalog
    where = _glue_conf(prefix, catalog) if isinstance(catalog, GlueCatalog) else _local_conf(prefix, catalog)
    return _engine_conf(settings.catalog_name) | where | settings.extra_conf


def _engine_conf(name: str) -> dict[str, str]:
    """What every session of cdclake's sets, wherever it runs: Iceberg as the catalog ``name``, UTC, and
    the planning and reading settings the engine's plans rely on."""
    prefix = f"spark.sql.catalog.{name}"
    return {
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.defaultCatalog": name,
        # DMS timestamps carry no zone; read and write them as UTC wall-clock values.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.iceberg.handle-timestamp-without-timezone": "true",
        # The bad-row check is `limit(n).collect()` over the whole batch: by default its first job scans
        # one partition, then 4x more per job, serialising a full-load scan. Scan every partition at once.
        "spark.sql.limit.initialNumPartitions": "100000",
        # The tables of a run are applied concurrently, each in a scheduler pool of its own
        # (``engine.parallel``): FAIR shares the executors between the pools, so a small table's
        # jobs are not queued behind a big table's stages.
        "spark.scheduler.mode": "FAIR",
        # Constraint inference walks every alias of a projection against every other: over the
        # typing and checks of a wide table (60 columns) with a filter above it, planning ran for
        # minutes (SPARK-19846 and kin). The filters it would infer (IS NOT NULL for joins) are
        # worth nothing to cdclake's plans.
        "spark.sql.constraintPropagation.enabled": "false",
        # HotSpot never compiles a method over 8,000 bytes of bytecode: it stays interpreted. The
        # typing and checks of a change row (casts, lossy-digit and commit-instant checks, their
        # reasons) make whole-stage code far larger than that, and a 1M-row load ran 2x slower.
        # Over this size Spark drops whole-stage code for the subtree and evaluates its
        # expressions in split methods the JIT compiles (the value Spark's documentation gives
        # for HotSpot).
        "spark.sql.codegen.hugeMethodLimit": "8000",
        # Each bronze file, or split of one, is read in a partition of its own: a file's open cost
        # above any partition's size closes the partition after it. A row's place in its file is then
        # the lower bits of its row id, whichever files are read with it (``dms.reader``). The
        # reader coalesces its partitions again, without a shuffle, so no task is added.
        "spark.sql.files.openCostInBytes": str(OPEN_COST_BYTES),
        # Dates and timestamps of any year (0001-9999 and beyond) as the Iceberg spec, pyiceberg,
        # Athena and the driver's pyarrow store them: proleptic Gregorian, unshifted. Spark's
        # default refuses to write values before 1582-10-15 (WRITE_ANCIENT_DATETIME) and to read
        # them from files other writers made (DMS's Parquet); LEGACY would shift them into Spark's
        # old hybrid calendar, which only Spark shifts back.
        **{
            f"spark.sql.parquet.{kind}RebaseModeIn{way}": "CORRECTED"
            for kind in ("datetime", "int96")
            for way in ("Read", "Write")
        },
    }


def _glue_conf(prefix: str, catalog: GlueCatalog) -> dict[str, str]:
    """The catalog ``prefix`` as the AWS Glue Data Catalog, its files in S3."""
    return {
        f"{prefix}.catalog-impl": "org.apache.iceberg.aws.glue.GlueCatalog",
        f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"{prefix}.warehouse": catalog.warehouse,
        # Iceberg's GlueCatalog refuses names outside [a-z0-9_] by default; DMS writes tables
        # such as inventory.order-items, which the Glue API itself accepts (cdclake quotes them).
        f"{prefix}.glue.skip-name-validation": "true",
    }


def _local_conf(prefix: str, catalog: LocalCatalog) -> dict[str, str]:
    """The catalog ``prefix`` as a local Hadoop warehouse, and the local driver that runs it."""
    return {
        f"{prefix}.type": "hadoop",
        f"{prefix}.warehouse": str(catalog.warehouse.resolve()),
        "spark.master": f"local[{catalog.cores}]",
        "spark.driver.memory": catalog.driver_memory,
        "spark.sql.shuffle.partitions": str(catalog.shuffle_partitions),
        "spark.default.parallelism": str(catalog.shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={catalog.cache_dir} "
        f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()} {catalog.jvm_options}".strip(),
    }


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_dead_scratch(root: Path, alive: Callable[[int], bool] = process_alive) -> list[Path]:
    """Remove the scratch folders (``root/<pid>``) of cdclake processes that no longer run: Spark
    leaves its shuffle and broadcast files there, and a killed process never removes them. A
    folder of a live process, or one not named by a process id, is left alone. Returns what went."""
    removed = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.is_dir() and folder.name.isdigit() and not alive(int(folder.name)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def build_spark_session(settings: SessionSettings) -> SparkSession:
    """Create (or reuse) the Spark session with the Iceberg catalog ``settings`` describes."""
    from pyspark.sql import SparkSession

    conf = spark_conf(settings)
    if isinstance(settings.catalog, LocalCatalog):
        require_java()
        runtime = resolve_iceberg_runtime(
            settings.catalog.cache_dir, settings.catalog.runtime_jar, settings.catalog.maven_packages
        )
        if runtime.jars:
            conf["spark.jars"] = ",".join(str(j) for j in runtime.jars)
        if runtime.packages:
            conf["spark.jars.packages"] = ",".join(runtime.packages)
        # Spark's scratch (shuffle, broadcast and block files) in a folder of this process's own,
        # so that the next run can tell a killed process's leftovers from a live one's.
        scratch = settings.catalog.cache_dir / "scratch"
        clear_dead_scratch(scratch)
        conf.setdefault("spark.local.dir", str(scratch / str(os.getpid())))
    builder = SparkSession.builder.appName(settings.app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    pin_jvm_names(session.sparkContext._jvm)
    return session

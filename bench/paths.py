"""Where the benchmarks work and where the relocated Jackson jar is cached (shared by every bench)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = Path.home() / ".cache" / "cdclake"


@contextmanager
def scratch_session(workdir: Path, extra_conf: dict[str, str] | None = None) -> Iterator[SparkSession]:
    """A standalone bench's Spark session with a warehouse of its own under ``workdir`` (emptied
    before and removed after), logging the bench's lines and not the engine's; ``extra_conf``: Spark
    settings over the session's own."""
    from cdclake.runtime.session import LocalCatalog, SessionSettings, build_spark_session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("cdclake", "py4j", "pyiceberg"):  # pyiceberg: "Loaded FileIO" at INFO for every table read
        logging.getLogger(noisy).setLevel(logging.WARNING)
    shutil.rmtree(workdir, ignore_errors=True)
    spark = build_spark_session(
        SessionSettings(
            catalog=LocalCatalog(warehouse=workdir / "warehouse", cache_dir=CACHE_DIR), extra_conf=extra_conf or {}
        )
    )
    try:
        yield spark
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)

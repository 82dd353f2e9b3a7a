"""A run's cost against bronze's age: a CDC run (and a `run --follow` round) with one new file per table,
on a warehouse whose bronze and ledger hold 1k vs 1M applied keys.

    .venv/bin/python -m bench.bronze_age --small 1000 --large 1000000      # make bench-bronze-age

Both sizes are built the same way, with the engine's real entry points: two tables loaded and given
a CDC batch by the version before checkpoints (no ``cdclake.ledger-checkpoint`` in their commits),
their snapshots expired into the ledger archive as maintenance does, then the archive given the
rest of the applied keys (half the size per table, CDC file names of 2020): a real ledger, read by
``read_ledger`` as a table of that age is. Bronze holds the same keys: the real files (the LOAD
files and the new CDC files) on disk, the old ones in a listing that answers as S3 does (sorted,
``StartAfter``, a request per 1,000 keys: ``AgedBronze``), since creating 1M objects in moto or 1M
files on disk takes longer than the runs measured. ``--moto-keys`` checks that request count
against moto S3 with a botocore event hook counting the ListObjectsV2 requests of a whole listing
and of a listing from a watermark.

Per size: the first run (reads the old ledger whole once and writes the first checkpoint), then
``--reps`` runs and follows, each with one new file per table, timed; their LIST requests; the driver's
Python memory at its peak during a run (tracemalloc, a run of its own); and one ``run --sweep`` (the
whole listing and ledger, what every run cost before). Writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import shutil
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.dms.store import LocalBronze

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger("bench")

TABLES = ("orders", "customers")
TARGET = 1.2  # a run at the large size takes at most this many times the small size's
PAGE = 1000  # keys per ListObjectsV2 page


@dataclass
class AgedBronze(LocalBronze):
    """A local bronze directory plus old keys that only a listing shows, answered as S3 answers a
    ListObjectsV2: in key order, after ``StartAfter``; ``requests`` counts a request per 1,000 keys
    (at least one per listing). The old keys' files are never read: their ledger says applied."""

    old: list[str] = field(default_factory=list)  # sorted
    requests: int = 0

    def list_keys(self, under: str = "", start_after: str | None = None) -> Iterator[tuple[str, int]]:
        prefix = f"{under.strip('/')}/" if under else ""
        lo = bisect.bisect_left(self.old, prefix)
        if start_after is not None:
            lo = max(lo, bisect.bisect_right(self.old, start_after))
        hi = bisect.bisect_left(self.old, prefix + "\uffff") if prefix else len(self.old)
        real = sorted(super().list_keys(under, start_after))
        listed = len(real) + max(0, hi - lo)
        self.requests += max(1, math.ceil(listed / PAGE))
        yield from ((key, 1) for key in self.old[lo:hi])
        yield from real

    def size(self, key: str) -> int | None:
        return 1 if self._is_old(key) else super().size(key)

    def _is_old(self, key: str) -> bool:
        at = bisect.bisect_left(self.old, key)
        return at < len(self.old) and self.old[at] == key


def old_key(table: str, n: int) -> str:
    """The ``n``-th old CDC key of a table: date folders of 2020, a file a minute."""
    moment = datetime(2020, 1, 1) + timedelta(minutes=n)
    return f"s/{table}/{moment:%Y/%m/%d}/{moment:%Y%m%d-%H%M%S}0000.csv"


def config_yaml(database: str) -> str:
    lines = [f"silver: {{database: {database}}}", "bronze: {timestamp_column: ts}", "tables:"]
    lines += [f"  s.{t}: {{primary_key: [id], columns: {{id: int, name: string}}}}" for t in TABLES]
    return "\n".join(lines) + "\n"


class Warehouse:
    """One size's tables: bronze on disk plus old keys, a ledger of that many applied keys."""

    def __init__(self, spark: SparkSession, work: Path, keys: int) -> None:
        from cdclake.config import parse_config
        from cdclake.context import Engine

        self.keys = keys
        self.bronze = work / f"bronze-{keys}"
        shutil.rmtree(self.bronze, ignore_errors=True)
        self.minute = 0
        self.store = AgedBronze(self.bronze)  # its old keys arrive with the archive (``build``)
        config = parse_config(config_yaml(f"age_{keys}"), "bench.yaml")
        config = replace(config, bronze=replace(config.bronze, path=str(self.bronze)))
        self.engine = Engine(spark=spark, config=config, store=self.store)

    def new_files(self) -> None:
        """One new CDC file per table (three changes each), named now."""
        from cdclake.dms.writer import SourceChange, cdc_file_name, cdc_records, write_csv

        self.minute += 1
        now = datetime.now(UTC) - timedelta(days=1) + timedelta(seconds=self.minute)
        ts = now.strftime("%Y-%m-%d %H:%M:%S.000000")
        for table in TABLES:
            changes = [
                SourceChange("U", {"id": "1", "name": f"u{self.minute}", "ts": ts}, ts, ""),
                SourceChange("I", {"id": str(100 + self.minute), "name": "new", "ts": ts}, ts, ""),
                SourceChange("D", {"id": str(99 + self.minute), "name": "", "ts": ts}, ts, ""),
            ]
            path = self.bronze / "s" / table / f"{now:%Y/%m/%d}" / cdc_file_name(ts)
            write_csv(path, cdc_records(changes, ["id", "name"], with_timestamp=True, with_seq=False))

    def build(self) -> None:
        """Load, apply a batch, all without checkpoints (the version before); expire into the archive;
        then the archive's old entries."""
        from cdclake.dms.writer import write_csv
        from cdclake.engine.run import run
        from cdclake.lake.iceberg import IcebergTable
        from cdclake.lake.ledger import archive_ledger, expiring_snapshots
        from cdclake.lake.ledger_record import LedgerCheckpoint

        for table in TABLES:
            rows = [["2019-12-31 00:00:00.000000", str(i), f"n{i}"] for i in range(1, 200)]
            write_csv(self.bronze / "s" / table / "LOAD00000001.csv", rows)
        self.new_files()
        properties = LedgerCheckpoint.properties
        LedgerCheckpoint.properties = lambda self: {}  # type: ignore[method-assign]
        try:
            run(self.engine, sweep=True).checked()
        finally:
            LedgerCheckpoint.properties = properties  # type: ignore[method-assign]
        spark, database = self.engine.spark, self.engine.config.database
        per_table = self.keys // len(TABLES)
        future = datetime.now(UTC) + timedelta(days=1)
        for config in self.engine.config.tables:
            silver = self.engine.silver_table(config)
            archive_ledger(spark, silver, expiring_snapshots(spark, silver, future, 1))
            IcebergTable.latest(spark, silver.identifier).expire_snapshots(future, 1)
            spark.sql(
                f"INSERT INTO silver.{database}.cdclake_ledger "
                f"SELECT '{silver.name}', concat('s/{config.source_table}/', "
                "date_format(ts, 'yyyy/MM/dd/yyyyMMdd-HHmmss'), '0000.csv'), 'cdc', 0, NULL, 0, NULL "
                f"FROM (SELECT timestampadd(MINUTE, id, TIMESTAMP '2020-01-01 00:00:00') AS ts FROM range({per_table}))"
            )
        self.store.old = sorted(old_key(t, n) for t in TABLES for n in range(per_table))


def _timed_run(house: Warehouse) -> tuple[float, int]:
    from cdclake.engine.run import run

    house.new_files()
    house.store.requests = 0
    started = time.perf_counter()
    run(house.engine).checked()
    return time.perf_counter() - started, house.store.requests


def _timed_follow(house: Warehouse) -> tuple[float, int, int]:
    """A follow that finds one new file per table, applies them in a round and ends idle: its seconds
    less the idle wait, its LIST requests, its rounds."""
    from cdclake.dms.notices import Polling
    from cdclake.engine.follow import FollowSettings, follow

    idle = 0.5
    house.new_files()
    house.store.requests = 0
    started = time.perf_counter()
    outcome = follow(house.engine, FollowSettings(poll_seconds=0.2, idle_seconds=idle), Polling())
    seconds = time.perf_counter() - started - idle
    if outcome.failures or outcome.files_applied != len(TABLES):
        raise AssertionError(f"the follow applied {outcome.files_applied} files: {outcome.failures}")
    return seconds, house.store.requests, outcome.rounds


def _peak_memory(house: Warehouse) -> int:
    """The driver's Python allocations at their peak during one run (bytes)."""
    from cdclake.engine.run import run

    house.new_files()
    tracemalloc.start()
    try:
        run(house.engine).checked()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _state_size(house: Warehouse) -> int:
    from cdclake.lake.ledger import read_ledger

    return sum(
        read_ledger(house.engine.spark, house.engine.silver_table(t)).applied.size for t in house.engine.config.tables
    )


def measure(spark: SparkSession, work: Path, sizes: tuple[int, int], reps: int) -> dict[str, dict[str, Any]]:
    """Both sizes built, then measured in turn, a run of one and then of the other, so that a machine
    whose load changes (other processes) weighs on both alike."""
    from cdclake.engine.run import run

    houses: dict[int, Warehouse] = {}
    results: dict[int, dict[str, Any]] = {}
    for keys in sizes:
        started = time.perf_counter()
        houses[keys] = Warehouse(spark, work, keys)
        houses[keys].build()
        results[keys] = {"keys": keys, "build seconds": round(time.perf_counter() - started, 1)}
    for keys, house in houses.items():
        seconds, requests = _timed_run(house)
        results[keys] |= {"first run seconds": round(seconds, 2), "first run LIST requests": requests}
    for keys in sizes:
        results[keys] |= {"run seconds": [], "run LIST requests": [], "follow seconds": [], "follow LIST requests": []}
    for _ in range(reps):
        for keys, house in houses.items():
            seconds, requests = _timed_run(house)
            results[keys]["run seconds"].append(round(seconds, 2))
            results[keys]["run LIST requests"].append(requests)
        for keys, house in houses.items():
            seconds, requests, _ = _timed_follow(house)
            results[keys]["follow seconds"].append(round(seconds, 2))
            results[keys]["follow LIST requests"].append(requests)
    for keys, house in houses.items():
        results[keys]["peak Python MiB"] = round(_peak_memory(house) / (1 << 20), 1)
        results[keys]["ledger state (named keys, exceptions, watermarks)"] = _state_size(house)
        house.new_files()
        house.store.requests = 0
        started = time.perf_counter()
        run(house.engine, sweep=True).checked()
        results[keys] |= {
            "sweep seconds": round(time.perf_counter() - started, 2),
            "sweep LIST requests": house.store.requests,
        }
        log.info("bronze age %d keys: %s", keys, results[keys])
    return {"small": results[sizes[0]], "large": results[sizes[1]]}


def moto_requests(keys: int) -> dict[str, int]:
    """ListObjectsV2 requests, counted by a botocore event hook on a moto S3 client, for one table
    folder of ``keys`` CDC keys: listed whole, and from a watermark with one new key after it."""
    import boto3
    from moto import mock_aws

    from cdclake.dms.index import list_from
    from cdclake.dms.s3_bronze import S3Bronze

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="bronze")
        for n in range(keys):
            s3.put_object(Bucket="bronze", Key=f"dms/{old_key('orders', n)}", Body=b"x")
        seen: list[int] = []
        s3.meta.events.register("before-call.s3.ListObjectsV2", lambda **_: seen.append(1))
        store = S3Bronze(s3, "bronze", "dms")
        whole = list_from(store, {"s/orders": None})
        whole_requests = len(seen)
        s3.put_object(Bucket="bronze", Key=f"dms/{old_key('orders', keys)}", Body=b"x")
        seen.clear()
        bounded = list_from(store, {"s/orders": old_key("orders", keys - 1)})
        assert len(whole.files) == keys and len(bounded.files) == 1
        return {"keys": keys, "whole listing": whole_requests, "from the watermark": len(seen)}


def render(result: dict[str, Any]) -> str:
    small, large = result["small"], result["large"]
    run_ratio = min(large["run seconds"]) / min(small["run seconds"])
    follow_ratio = min(large["follow seconds"]) / min(small["follow seconds"])
    moto = result["moto"]

    def verdict(ratio: float) -> str:
        return f"{ratio:.2f}× ({'met' if ratio <= TARGET else '**missed**'}: ≤ {TARGET}×)"

    def row(name: str, key: str, fmt: str = "{}") -> str:
        return f"| {name} | {fmt.format(small[key])} | {fmt.format(large[key])} |"

    return "\n".join(
        [
            f"#### Bronze's age: a run's cost with {small['keys']:,} vs {large['keys']:,} applied keys — measured "
            f"{result['measured']}",
            "",
            "Command: `make bench-bronze-age` (`python -m bench.bronze_age`). Two tables, one new CDC file each per "
            "run; the ledger's old keys in the ledger archive (real, read by `read_ledger`), bronze's old keys in a "
            "listing that pages as S3 does (1,000 keys a request; checked against moto below). The sizes' runs "
            f"alternate; best of {len(small['run seconds'])}. The machine (2 cores) was shared: load average "
            f"{result.get('load average', '?')} at the end, so the seconds are noisy; the requests and the state "
            "are exact.",
            "",
            f"| figure | {small['keys']:,} keys | {large['keys']:,} keys |",
            "|---|---:|---:|",
            f"| CDC run, seconds (best; all) | {min(small['run seconds'])} ({small['run seconds']}) | "
            f"{min(large['run seconds'])} ({large['run seconds']}) |",
            row("LIST requests per run", "run LIST requests"),
            f"| `run --follow`: start and one round, seconds (best; all) | {min(small['follow seconds'])} | "
            f"{min(large['follow seconds'])} ({large['follow seconds']}) |",
            row("LIST requests per follow", "follow LIST requests"),
            row("driver Python memory at peak in a run, MiB (tracemalloc)", "peak Python MiB"),
            row(
                "ledger state held (named keys + exceptions + watermarks)",
                "ledger state (named keys, exceptions, watermarks)",
            ),
            row("first run on the ledger written before checkpoints (once), seconds", "first run seconds"),
            row("its LIST requests", "first run LIST requests"),
            row("`run --sweep` (all of bronze, every ledger whole), seconds", "sweep seconds"),
            row("its LIST requests", "sweep LIST requests"),
            "",
            f"Run time, {large['keys']:,} keys vs {small['keys']:,}: {verdict(run_ratio)}; a follow: "
            f"{verdict(follow_ratio)}.",
            "",
            f"moto S3 (one table folder of {moto['keys']:,} keys, ListObjectsV2 requests counted by a botocore "
            f"event hook): the whole listing {moto['whole listing']}, the listing from the watermark "
            f"{moto['from the watermark']}. At 1M keys the whole listing is 1,000 requests (S3 pages 1,000 keys; "
            "extrapolated, not run against moto), as the sweep's count above shows.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from bench.paths import ROOT, scratch_session
    from bench.report import splice

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--moto-keys", type=int, default=5000)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-bronze-age")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result: dict[str, Any] = {"measured": datetime.now(UTC).strftime("%Y-%m-%d %H:%M")}
    result["moto"] = moto_requests(args.moto_keys)
    with scratch_session(args.workdir) as spark:
        result |= measure(spark, args.workdir, (args.small, args.large), args.reps)
    result["load average"] = round(os.getloadavg()[0], 1)
    print(json.dumps(result, indent=2))
    document = args.docs / "benchmarks.md"
    document.write_text(splice(document.read_text(), "bronze-age", render(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

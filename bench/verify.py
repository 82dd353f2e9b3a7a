"""``cdclake verify`` at size: checksums of key ranges against reading every row, and a plain SELECT.

    PYTHONPATH=glue .venv/bin/python -m bench.verify --rows 1000000        # make bench-verify
    PYTHONPATH=glue .venv/bin/python -m bench.verify --rows 10000000 --docs docs   # part of make bench PROFILE=full

A loopback PostgreSQL (``scripts/postgres-local.sh``) with one keyed table of ``rows`` rows (bigint key,
text, numeric, timestamptz, boolean), captured (a full load) and applied with the real commands, so
silver equals the source. Then, in one run and one Spark session:

* checksums: ``verify`` as users run it; its rows crossing the wire (the ranges' sums, and rows of a
  differing range), and the time;
* row by row: ``verify --rows`` (every row of both sides read and compared);
* plain SELECT: the table's rows fetched by psycopg2 and dropped (the floor of reading the source);
* one differing row: the same checksums after one row changed at the source (found, by key).

Targets: checksums at least 10x faster than row by row, at most 1 MB from the source when equal, and
one differing row found in at most 2x the equal case's time. Bytes from the source are measured, not estimated: the
text length of every value the source's cursors return (sums, rows), counted by a cursor class of our own.

``make bench`` runs it in a process of its own after the profile (1M rows in ``quick``, 10M in ``full``) and writes
its section of docs/benchmarks.md and docs/benchmarks-verify-<rows>.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from bench.paths import ROOT, scratch_session

log = logging.getLogger("bench")

SCHEMA = """
CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, balance numeric(14,2), opened timestamptz, active boolean);
INSERT INTO accounts SELECT i, 'owner ' || (i % 9973), (i % 100000) / 7.0,
       timestamptz '2020-01-01 00:00:00+00' + i * interval '37 seconds', i % 3 <> 0
FROM generate_series(1, ROWS) AS i;
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


TARGET_RATIO = 10.0  # checksums at least this many times faster than reading every row, when equal
TARGET_BYTES = 1_000_000  # at most this many bytes from the source, when equal
TARGET_DIFFERING = 2.0  # one differing row found in at most this many times the equal case's time


def counting_cursor() -> Any:
    """A psycopg2 cursor class that adds the text length of every value it returns to ``counted[0]``."""
    import psycopg2.extensions

    class CountingCursor(psycopg2.extensions.cursor):
        counted: ClassVar[list[int]] = [0]

        def _count(self, rows: list[Any]) -> list[Any]:
            CountingCursor.counted[0] += sum(len(str(v)) for row in rows for v in row if v is not None)
            return rows

        def fetchall(self) -> list[Any]:
            return self._count(list(super().fetchall()))

        def fetchmany(self, size: int | None = None) -> list[Any]:
            return self._count(list(super().fetchmany(size) if size is not None else super().fetchmany()))

        def fetchone(self) -> Any:
            row = super().fetchone()
            return row if row is None else self._count([row])[0]

        def __next__(self) -> Any:
            return self._count([super().__next__()])[0]

    return CountingCursor


def _each_side_alone(engine: Any, conn: Any) -> dict[str, float]:
    """The whole table's checksums of 64 ranges on each side alone, one after the other (seconds, best of 2):
    where the time of ``checksums`` goes when the two sides do not share the cores."""
    from cdclake.verify.checksum import KeyRange, kind_of, spark_boundaries, spark_sums
    from cdclake.verify.postgres.dialect import PostgresDialect

    dialect = PostgresDialect(conn)
    [source] = dialect.read_tables(["public"])
    columns = [(c.name, kind_of(c.spark_type) or "") for c in source.columns]
    frame = engine.spark.table(engine.silver_table(engine.config.tables[0]).identifier).select(*(n for n, _ in columns))
    cuts = spark_boundaries(frame, "id", "integer")(KeyRange(), 64)
    sides = {"source": dialect.sums(source, ("id", "integer"), columns), "silver": spark_sums(frame, "id", columns)}
    seconds = {}
    for side, sums in sides.items():
        times = []
        for _ in range(2):
            started = time.perf_counter()
            sums(KeyRange(), cuts)
            times.append(time.perf_counter() - started)
        seconds[side] = round(min(times), 2)
    return seconds


def measure(work: Path, rows: int) -> dict[str, Any]:
    import psycopg2

    from cdclake.config import parse_config
    from cdclake.context import Engine
    from cdclake.dms.store import LocalBronze
    from cdclake.engine.run import run
    from cdclake.sources.postgres.capture import capture
    from cdclake.sources.postgres.settings import CaptureSettings
    from cdclake.verify.compare import ChecksumSettings
    from cdclake.verify.postgres.dialect import verify

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    port, data = _free_port(), work / "pg"
    subprocess.run([ROOT / "scripts" / "postgres-local.sh", "start", data, str(port)], check=True)
    result: dict[str, Any] = {"rows": rows}
    try:
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        cursor = counting_cursor()
        conn = psycopg2.connect(dsn, cursor_factory=cursor)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(SCHEMA.replace("ROWS", str(rows)))
        bronze = work / "bronze"
        settings = CaptureSettings(
            dsn=dsn, bronze=bronze, state_dir=work / "capture", config_path=work / "cdclake.yaml"
        )
        started = time.perf_counter()
        capture(settings)
        result["capture_seconds"] = round(time.perf_counter() - started, 1)
        with scratch_session(work / "spark") as spark:
            config = parse_config((work / "cdclake.yaml").read_text(), "cdclake.yaml")
            config = replace(config, bronze=replace(config.bronze, path=str(bronze)))
            engine = Engine(spark=spark, config=config, store=LocalBronze(bronze))
            started = time.perf_counter()
            run(engine).checked()
            result["apply_seconds"] = round(time.perf_counter() - started, 1)

            def timed(name: str, checksums: ChecksumSettings | None) -> Any:
                cursor.counted[0] = 0
                started = time.perf_counter()
                found = verify(engine, conn, None, checksums)[0]
                seconds = time.perf_counter() - started
                result[name] = {
                    "seconds": round(seconds, 2),
                    "source_bytes": cursor.counted[0],
                    "equal": found.equal,
                    "ranges": found.ranges,
                    "ranges_read_row_by_row": found.ranges_differing,
                    "rows_read": found.rows_read,
                    "source_rows": found.source_rows,
                }
                log.info("%s: %.1f s %s", name, seconds, found.how())
                return found

            timed("checksums", ChecksumSettings())  # a first pass warms the JVM's code for both
            first = timed("checksums", ChecksumSettings())
            result["each_side_alone"] = _each_side_alone(engine, conn)
            conn.autocommit = False  # a named (server-side) cursor streams inside a transaction
            with conn.cursor(name="plain") as cur:
                started = time.perf_counter()
                cur.itersize = 5000
                cur.execute("SELECT * FROM accounts")
                fetched = sum(len(str(v)) for row in cur for v in row if v is not None)
                result["plain_select"] = {"seconds": round(time.perf_counter() - started, 2), "text_bytes": fetched}
            conn.commit()
            conn.autocommit = True
            timed("row_by_row", None)
            with conn.cursor() as cur:
                cur.execute("UPDATE accounts SET balance = balance + 0.01 WHERE id = %s", (rows // 3,))
            differing = timed("one_differing_row", ChecksumSettings())
            result["one_differing_row"]["found"] = differing.different
            assert first.equal and differing.different == [f"id={rows // 3}"], differing.different
        conn.close()
    finally:
        subprocess.run([ROOT / "scripts" / "postgres-local.sh", "stop", data], check=False)
    checksums, rows_path = result["checksums"]["seconds"], result["row_by_row"]["seconds"]
    result["row_by_row_vs_checksums"] = round(rows_path / checksums, 1)
    result["one_differing_vs_equal"] = round(result["one_differing_row"]["seconds"] / checksums, 2)
    return result


def _size(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows % 1_000_000 == 0 else f"{rows // 1000}k" if rows % 1000 == 0 else str(rows)


def _bytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1_000_000 else f"{count / 1e3:.1f} KB" if count >= 1000 else f"{count} B"


def render(result: dict[str, Any]) -> str:
    """The generated section of docs/benchmarks.md: each figure beside its target, from one run."""
    size, equal, rows = _size(result["rows"]), result["checksums"], result["row_by_row"]
    differing, select = result["one_differing_row"], result["plain_select"]
    ratio, against = result["row_by_row_vs_checksums"], result["one_differing_vs_equal"]
    alone = result.get("each_side_alone")  # measured since 2026-12-07

    def verdict(met: bool) -> str:
        return "**met**" if met else "**missed**"

    lines = [
        f"#### Verify, {size} rows — measured {result['finished']}",
        "",
        f"Command: `{result['command']}`. A loopback PostgreSQL 15 and local Spark on the same 2 cores; one keyed "
        f"table (bigint key, text, numeric(14,2), timestamptz, boolean) captured and applied with the real commands "
        f"(capture {result['capture_seconds']:g} s, apply {result['apply_seconds']:g} s).",
        "",
        "| figure | now | target |",
        "|---|---:|---|",
        f"| equal, by checksums ({equal['ranges']} ranges) | {equal['seconds']:.1f} s | |",
        *(
            [
                f"| the same, each side alone: the source's query / silver's job | {alone['source']:.1f} s / "
                f"{alone['silver']:.1f} s | |"
            ]
            if alone
            else []
        ),
        f"| equal, every row read (`verify --rows`) | {rows['seconds']:.1f} s | |",
        f"| checksums vs every row read | {ratio:g}× faster | ≥ {TARGET_RATIO:g}×: {verdict(ratio >= TARGET_RATIO)} |",
        f"| bytes from the source, equal, by checksums | {_bytes(equal['source_bytes'])} | ≤ 1 MB: "
        f"{verdict(equal['source_bytes'] <= TARGET_BYTES)} |",
        f"| bytes from the source, every row read | {_bytes(rows['source_bytes'])} | |",
        f"| a plain `SELECT *` of the source table (fetched, dropped) | {select['seconds']:.1f} s | |",
        f"| one differing row found ({differing['rows_read']} rows read) | {differing['seconds']:.1f} s, "
        f"{against:g}× the equal case | ≤ {TARGET_DIFFERING:g}×: {verdict(against <= TARGET_DIFFERING)} |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from datetime import datetime

    from bench.report import splice

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-verify")
    parser.add_argument("--docs", type=Path, default=None, help="write the section into DOCS/benchmarks.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    result = measure(args.workdir, args.rows)
    result["finished"] = datetime.now().strftime("%Y-%m-%d %H:%M")
    result["command"] = f"make bench-verify ROWS={args.rows}"
    print(json.dumps(result, indent=2))
    print(render(result))
    if args.docs:
        (args.docs / f"benchmarks-verify-{_size(args.rows)}.json").write_text(json.dumps(result, indent=2) + "\n")
        document = args.docs / "benchmarks.md"
        document.write_text(splice(document.read_text(), f"verify-{_size(args.rows)}", render(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``cdclake verify`` at size: checksums of key ranges against reading every row, and a plain SELECT.

    PYTHONPATH=glue .venv/bin/python -m bench.verify --rows 1000000        # make bench-verify

A loopback PostgreSQL (``scripts/postgres-local.sh``) with one keyed table of ``rows`` rows (bigint key,
text, numeric, timestamptz, boolean), captured (a full load) and applied with the real commands, so
silver equals the source. Then, in one run and one Spark session:

* checksums: ``verify`` as users run it; its rows crossing the wire (the ranges' sums, and rows of a
  differing range), and the time;
* row by row: ``verify --rows`` (every row of both sides read and compared);
* plain SELECT: the table's rows fetched by psycopg2 and dropped (the floor of reading the source);
* one differing row: the same checksums after one row changed at the source (found, by key).

Targets (the issue's): checksums at least 10x faster than row by row, at most 1 MB from the source when equal, and
one differing row found in at most 2x the equal case's time.
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
from typing import Any

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


def measure(work: Path, rows: int) -> dict[str, Any]:
    import psycopg2

    from cdclake.config import parse_config
    from cdclake.context import Engine
    from cdclake.dms.store import LocalBronze
    from cdclake.engine.run import run
    from cdclake.sources.postgres.capture import capture
    from cdclake.sources.postgres.settings import CaptureSettings
    from cdclake.sources.postgres.verify import ChecksumSettings, verify

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    port, data = _free_port(), work / "pg"
    subprocess.run([ROOT / "scripts" / "postgres-local.sh", "start", data, str(port)], check=True)
    result: dict[str, Any] = {"rows": rows}
    try:
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        conn = psycopg2.connect(dsn)
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
                started = time.perf_counter()
                found = verify(engine, conn, None, checksums)[0]
                seconds = time.perf_counter() - started
                result[name] = {
                    "seconds": round(seconds, 2),
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
    # What the checksums bring from the source when equal: one row (bucket, count, sum) per range.
    result["checksums"]["source_bytes_estimate"] = result["checksums"]["ranges"] * 3 * 20
    result["row_by_row_vs_checksums"] = round(rows_path / checksums, 1)
    result["one_differing_vs_equal"] = round(result["one_differing_row"]["seconds"] / checksums, 2)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-verify")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print(json.dumps(measure(args.workdir, args.rows), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

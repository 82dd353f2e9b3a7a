"""Freshness locally: the lag from a source commit to the row being visible in silver.

    PYTHONPATH=glue .venv/bin/python -m bench.freshness --minutes 3     # make bench-freshness

A loopback PostgreSQL (``scripts/postgres-local.sh``) with ``tables`` small keyed tables under a
pgbench-style load (``pgbench -R`` with a custom script updating random rows of random tables),
captured by ``cdclake capture --follow --max-batch-interval 5`` and applied by
``cdclake run --follow --poll-interval 2``: the two real commands, as two subprocesses, exactly as
a user starts them. Beside the load, a marker loop updates a random table's random row every
``interval`` seconds, setting ``v`` to a new marker (a number that only grows) and noting the
client's clock right after the commit returned. A sampler looks every second at

* bronze: each new CDC file is parsed; a marker's *capture time* is its file's modification time;
* silver: a table whose Iceberg metadata moved is read with pyiceberg (``StaticTable`` on the newest
  metadata file, no Spark); a marker is *visible* once its row's ``v`` is at least the marker
  (a later marker on the same row supersedes it and counts as it).

Lag = visible time - commit time (the sampler's clock; it looks once a second, so a lag is late by
half a second on average). Split into capture (commit -> file in bronze) and apply (file -> visible).
Markers of the first ``warmup`` seconds are left out: ``run --follow``'s first rounds pay for a new
JVM. Both commands are stopped with SIGINT; ``run --follow`` must end with 130.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import json
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.paths import ROOT

log = logging.getLogger("bench")
PG_BIN = Path("/usr/lib/postgresql/15/bin")
TARGET_P50, TARGET_P95 = 6.0, 10.0  # seconds, on 2 cores (30 busy tables)
DATABASE = "fresh"


@dataclass(frozen=True)
class FreshnessSettings:
    minutes: float = 3.0  # measured load, after the warm-up
    warmup_seconds: float = 30.0  # load whose markers are not counted (a new JVM's first rounds)
    tables: int = 30
    rows: int = 200  # per table
    interval: float = 0.5  # seconds between marker updates
    background_rate: int = 10  # pgbench transactions a second (0: none), each one row of a random table
    batch_interval: float = 5.0  # capture --max-batch-interval
    poll_seconds: float = 2.0  # run --follow --poll-interval


@dataclass
class Marker:
    table: str
    row: int
    value: int
    committed: float  # time.time() right after COMMIT returned
    captured: float | None = None  # mtime of the CDC file that holds it
    visible: float | None = None  # when the sampler first saw it (or a later marker of its row) in silver

    @property
    def lag(self) -> float | None:
        return None if self.visible is None else self.visible - self.committed


def table_name(index: int) -> str:
    return f"fresh_{index}"  # no padding: pgbench's script names it as fresh_:t


def percentile(values: Sequence[float], share: float) -> float:
    """The ``share`` quantile (0..1) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * share
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarise(lags: Sequence[float]) -> dict[str, float]:
    return {
        "p50": percentile(lags, 0.5),
        "p95": percentile(lags, 0.95),
        "max": max(lags),
        "mean": statistics.fmean(lags),
    }


def rounds_of(lines: Sequence[tuple[float, str]], gap: float = 0.5) -> list[dict[str, Any]]:
    """``run --follow``'s table lines grouped into rounds: a round prints its tables together when it
    ends, so lines closer than ``gap`` seconds belong to one round. Each round: when it ended, its
    tables, files applied and the sum of its tables' seconds."""
    found: list[dict[str, Any]] = []
    last = -1e18
    for stamp, line in lines:
        parts = line.split()
        if len(parts) < 3 or not parts[-1].endswith("s") or "files=" not in line:
            continue
        if stamp - last > gap:
            found.append({"ended": stamp, "tables": 0, "files": 0, "table_seconds": 0.0})
        last = stamp
        current = found[-1]
        current["ended"] = stamp
        current["tables"] += 1
        files = next((p for p in parts if p.startswith("files=")), "files=0")
        current["files"] += int(files.split("=", 1)[1])
        with contextlib.suppress(ValueError):  # a line whose last field is not "N.Ns"
            current["table_seconds"] += float(parts[-1].rstrip("s").split("(")[0])
    return found


def cut_lags(lines: Sequence[tuple[float, str]], start: float, end: float) -> dict[str, list[float]]:
    """The consistent cut's lag from ``run --follow``'s ``cut: at T (...)`` lines (T: the source commit
    time every table holds, UTC): ``published``, the line's time - T for each cut published in
    [start, end]; ``age``, now - T of the latest cut, sampled each second of [start, end] (what a reader
    of the cut sees at a random moment); ``settled``, the seconds each published cut took its round
    (the line's ``; settled in N s``)."""
    from datetime import UTC, datetime

    cuts: list[tuple[float, float]] = []
    settled: list[float] = []
    for stamp, line in lines:
        if not line.startswith("cut: at ") or " (" not in line:
            continue
        try:
            at = datetime.fromisoformat(line[len("cut: at ") : line.index(" (")]).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
        cuts.append((stamp, at))
        if start <= stamp <= end and "; settled in " in line:
            with contextlib.suppress(ValueError):
                settled.append(float(line.rsplit("; settled in ", 1)[1].removesuffix(" s")))
    published = [stamp - at for stamp, at in cuts if start <= stamp <= end]
    age, index, latest = [], 0, None
    moment = start
    while moment <= end:
        while index < len(cuts) and cuts[index][0] <= moment:
            latest, index = cuts[index][1], index + 1
        if latest is not None:
            age.append(moment - latest)
        moment += 1.0
    return {"published": published, "age": age, "settled": settled}


# ---------------------------------------------------------------------------------- the source


class Source:
    """The loopback PostgreSQL server and the benchmark's database."""

    def __init__(self, home: Path, port: int) -> None:
        self.home, self.port = home, port
        self.data = home / "data"

    def dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database}"

    def start(self) -> None:
        subprocess.run([ROOT / "scripts" / "postgres-local.sh", "start", self.data, str(self.port)], check=True)

    def stop(self) -> None:
        subprocess.run([ROOT / "scripts" / "postgres-local.sh", "stop", self.data], check=False)

    def create(self, settings: FreshnessSettings) -> None:
        import psycopg2

        conn = psycopg2.connect(self.dsn())
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DATABASE}")
        conn.close()
        conn = psycopg2.connect(self.dsn(DATABASE))
        with conn, conn.cursor() as cur:
            for index in range(settings.tables):
                name = table_name(index)
                cur.execute(
                    f"CREATE TABLE {name} (id int PRIMARY KEY, v bigint NOT NULL, n bigint NOT NULL, note text)"
                )
                cur.execute(
                    f"INSERT INTO {name} SELECT g, 0, 0, 'row ' || g FROM generate_series(1, %s) g", (settings.rows,)
                )
        conn.close()


def pgbench_script(settings: FreshnessSettings) -> str:
    """One transaction of the background load: a random row of a random table (never ``v``)."""
    return (
        f"\\set t random(0, {settings.tables - 1})\n"
        f"\\set id random(1, {settings.rows})\n"
        "UPDATE fresh_:t SET n = n + 1, note = md5(random()::text) WHERE id = :id;\n"
    )


# ---------------------------------------------------------------------------------- measurement


@dataclass
class Observer:
    """Bronze and silver, looked at once a second; the markers' capture and visible times."""

    bronze: Path
    warehouse: Path
    markers: list[Marker] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen_files: set[Path] = field(default_factory=set)
    versions: dict[str, str] = field(default_factory=dict)
    scans: int = 0
    scan_seconds: float = 0.0

    def add(self, marker: Marker) -> None:
        with self.lock:
            self.markers.append(marker)

    def look(self) -> None:
        now = time.time()
        with self.lock:
            waiting = [m for m in self.markers if m.visible is None]
        self._bronze(waiting)
        for table in sorted({m.table for m in waiting}):
            self._silver(table, [m for m in waiting if m.table == table], now)

    def _bronze(self, waiting: list[Marker]) -> None:
        by_value = {m.value: m for m in waiting if m.captured is None}
        for folder in sorted((self.bronze / "public").glob("fresh_*")):
            for path in sorted(folder.glob("2*.csv")):  # CDC files (yyyyMMdd-...); LOAD files skipped
                if path in self.seen_files:
                    continue
                self.seen_files.add(path)
                mtime = path.stat().st_mtime
                rows = csv.DictReader(io.StringIO(path.read_text("utf-8")))
                for row in rows:
                    marker = by_value.get(int(row.get("v") or -1))
                    if marker is not None and marker.table == folder.name:
                        marker.captured = mtime

    def _silver(self, table: str, waiting: list[Marker], now: float) -> None:
        from pyiceberg.table import StaticTable

        found = sorted(self.warehouse.glob(f"*/{table}/metadata/version-hint.text"))  # the database capture named
        if not found:
            return
        hint = found[0]
        folder = hint.parent
        version = hint.read_text().strip()
        if self.versions.get(table) == version:
            return
        metadata = folder / f"v{version}.metadata.json"
        if not metadata.exists():
            return
        started = time.perf_counter()
        frame = StaticTable.from_metadata(str(metadata)).scan(selected_fields=("id", "v")).to_arrow()
        self.scans += 1
        self.scan_seconds += time.perf_counter() - started
        self.versions[table] = version
        current = dict(zip(frame.column("id").to_pylist(), frame.column("v").to_pylist(), strict=True))
        for marker in waiting:
            if current.get(marker.row, -1) >= marker.value:
                marker.visible = now


def drive_markers(
    source: Source, observer: Observer, settings: FreshnessSettings, until: float, stopping: threading.Event
) -> None:
    """Every ``interval`` seconds: one row of a random table gets the next marker, in its own commit."""
    import psycopg2

    rng = random.Random(20261127)
    conn = psycopg2.connect(source.dsn(DATABASE))
    conn.autocommit = True
    value = 0
    next_at = time.monotonic()
    with conn.cursor() as cur:
        while time.monotonic() < until and not stopping.is_set():
            value += 1
            table, row = table_name(rng.randrange(settings.tables)), rng.randint(1, settings.rows)
            cur.execute(f"UPDATE {table} SET v = %s WHERE id = %s", (value, row))
            observer.add(Marker(table, row, value, time.time()))
            next_at += settings.interval
            stopping.wait(max(0.0, next_at - time.monotonic()))
    conn.close()


def read_lines(stream: IO[str], into: list[tuple[float, str]], echo: IO[str]) -> None:
    """Each line of a subprocess's output with the time it arrived (and a copy in a log file)."""
    for line in stream:
        into.append((time.time(), line.rstrip("\n")))
        echo.write(f"{time.time():.3f} {line}")
        echo.flush()


def cdclake(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "cdclake.shells.cli", *map(str, args)]


def measure(settings: FreshnessSettings, work: Path) -> dict[str, Any]:
    """Start the source, the two commands and the load; return the lags and what explains them."""
    import socket

    home = Path(tempfile.mkdtemp(prefix="cdclake-fresh-pg-"))  # reachable by the postgres OS user
    home.chmod(0o755)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    source = Source(home, port)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config, bronze, warehouse = work / "cdclake.yaml", work / "bronze", work / "warehouse"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "glue"), str(ROOT)])}
    common: list[str | Path] = ["-q", "--config", config, "--bronze", bronze, "--warehouse", warehouse]
    processes: dict[str, subprocess.Popen[str]] = {}
    stopping = threading.Event()
    lines: list[tuple[float, str]] = []
    result: dict[str, Any] = {"settings": settings.__dict__}
    source.start()
    try:
        source.create(settings)
        dsn = source.dsn(DATABASE)
        capture_args: list[str | Path] = [*common, "capture", "--dsn", dsn, "--state-dir", work / "capture"]
        started = time.perf_counter()
        subprocess.run(cdclake(*capture_args), check=True, env=env, stdout=subprocess.DEVNULL)
        result["first_capture_seconds"] = time.perf_counter() - started
        log.info(
            "first capture (slot + full load of %d tables): %.1f s", settings.tables, result["first_capture_seconds"]
        )
        capture_log = (work / "capture.log").open("w")
        processes["capture"] = subprocess.Popen(
            cdclake(*capture_args, "--follow", "--max-batch-interval", str(settings.batch_interval)),
            env=env,
            stdout=capture_log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        run_log = (work / "run-follow.log").open("w")
        follow_started = time.time()
        processes["run"] = subprocess.Popen(
            cdclake(*common, "run", "--follow", "--poll-interval", str(settings.poll_seconds)),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert processes["run"].stdout is not None
        reader = threading.Thread(target=read_lines, args=(processes["run"].stdout, lines, run_log), daemon=True)
        reader.start()
        # The first round full-loads every table: wait for it before any load (its JVM is new).
        deadline = time.time() + 600
        while sum("full-load" in line for _, line in lines) < settings.tables:
            if processes["run"].poll() is not None or time.time() > deadline:
                raise RuntimeError(f"run --follow did not full-load the tables: see {work / 'run-follow.log'}")
            time.sleep(0.5)
        result["first_round_seconds"] = time.time() - follow_started
        log.info("run --follow: full loads done after %.1f s; load starts", result["first_round_seconds"])

        load_seconds = settings.warmup_seconds + settings.minutes * 60
        pgbench = None
        if settings.background_rate:
            script = work / "load.sql"
            script.write_text(pgbench_script(settings))
            pgbench = subprocess.Popen(
                [
                    PG_BIN / "pgbench",
                    "-n",
                    "-c",
                    "2",
                    "-R",
                    str(settings.background_rate),
                    "-T",
                    str(int(load_seconds)),
                    "-f",
                    script,
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-U",
                    "postgres",
                    DATABASE,
                ],
                stdout=(work / "pgbench.log").open("w"),
                stderr=subprocess.STDOUT,
            )
        observer = Observer(bronze, warehouse)
        load_started = time.time()
        until = time.monotonic() + load_seconds
        driver = threading.Thread(target=drive_markers, args=(source, observer, settings, until, stopping))
        driver.start()
        # Sample until the load has ended and every marker is visible (or 120 s more have passed).
        drain_until = until + 120
        while time.monotonic() < drain_until:
            tick = time.monotonic()
            observer.look()
            with observer.lock:
                left = sum(m.visible is None for m in observer.markers)
            if time.monotonic() >= until and not driver.is_alive() and left == 0:
                break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        driver.join()
        if pgbench is not None:
            pgbench.wait(timeout=60)
        counted = [m for m in observer.markers if m.committed >= load_started + settings.warmup_seconds]
        lags = [m.lag for m in counted if m.lag is not None]
        captured = [m.captured - m.committed for m in counted if m.captured is not None]
        applied = [m.visible - m.captured for m in counted if m.visible is not None and m.captured is not None]
        measured_rounds = [r for r in rounds_of(lines) if r["ended"] >= load_started + settings.warmup_seconds]
        ends = [r["ended"] for r in measured_rounds]
        cut = cut_lags(lines, load_started + settings.warmup_seconds, load_started + load_seconds)
        result |= {
            "markers": len(counted),
            "visible": len(lags),
            "never_visible": len(counted) - len(lags),
            "lag": summarise(lags) if lags else {},
            "capture_lag": summarise(captured) if captured else {},
            "apply_lag": summarise(applied) if applied else {},
            "rounds": len(measured_rounds),
            "round_interval": summarise([b - a for a, b in itertools.pairwise(ends)]) if len(ends) > 2 else {},
            "round_tables_mean": statistics.fmean(r["tables"] for r in measured_rounds) if measured_rounds else 0.0,
            "round_table_seconds_mean": (
                statistics.fmean(r["table_seconds"] for r in measured_rounds) if measured_rounds else 0.0
            ),
            "cuts_published": len(cut["published"]),
            "cut_published_lag": summarise(cut["published"]) if cut["published"] else {},
            "cut_age": summarise(cut["age"]) if cut["age"] else {},
            "cut_settle_seconds": summarise(cut["settled"]) if cut["settled"] else {},
            "silver_scans": observer.scans,
            "silver_scan_seconds": observer.scan_seconds,
            "load_average": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
        }
        if lags:
            result["met"] = result["lag"]["p50"] <= TARGET_P50 and result["lag"]["p95"] <= TARGET_P95
    finally:
        stopping.set()
        codes = {}
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for name, process in processes.items():
            try:
                codes[name] = process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[name] = process.wait()
        result["exit_codes"] = codes
        source.stop()
        shutil.rmtree(home, ignore_errors=True)
    if codes.get("run") != 130:
        raise AssertionError(f"run --follow ended with {codes.get('run')} on SIGINT, expected 130")
    if result.get("never_visible"):  # a fast wrong answer fails the benchmark
        raise AssertionError(f"{result['never_visible']} markers never reached silver: see {work}")
    return result


# ---------------------------------------------------------------------------------- report


def render(result: dict[str, Any], command: str) -> str:
    s = result["settings"]
    lag, cap, app = result["lag"], result["capture_lag"], result["apply_lag"]
    met = "**met**" if result.get("met") else "**missed**"
    interval = result["round_interval"]
    background = (
        f"background load `pgbench -R {s['background_rate']}` (one random row of a random table per transaction)"
        if s["background_rate"]
        else "no background load"
    )
    lines = [
        f"#### Freshness — measured {result['finished']}",
        "",
        f"Command: `{command}` (wall time {result['wall_seconds'] / 60:.1f} min; load average "
        f"{result['load_average']} when it ended).",
        "",
        f"PostgreSQL 15 on loopback, {s['tables']} tables of {s['rows']} rows; {background}; a marker update every "
        f"{s['interval']} s; `cdclake capture --follow --max-batch-interval {s['batch_interval']:g}` and "
        f"`cdclake run --follow --poll-interval {s['poll_seconds']:g}` as two processes. {result['minutes_text']}",
        "",
        "| commit → visible in silver | p50 | p95 | max | target |",
        "|---|---:|---:|---:|---|",
        f"| lag ({result['visible']} of {result['markers']} markers) | {lag['p50']:.1f} s | {lag['p95']:.1f} s | "
        f"{lag['max']:.1f} s | p50 ≤ {TARGET_P50:g} s, p95 ≤ {TARGET_P95:g} s: {met} |",
        f"| of which capture (commit → CDC file in bronze) | {cap['p50']:.1f} s | {cap['p95']:.1f} s | "
        f"{cap['max']:.1f} s | |",
        f"| of which apply (CDC file → visible) | {app['p50']:.1f} s | {app['p95']:.1f} s | {app['max']:.1f} s | |",
        *_cut_rows(result),
        "",
        f"`run --follow` during the measured load: {result['rounds']} rounds, one ending every "
        f"{interval.get('p50', float('nan')):.1f} s (p50; p95 {interval.get('p95', float('nan')):.1f} s), "
        f"{result['round_tables_mean']:.1f} tables a round, their seconds summing to "
        f"{result['round_table_seconds_mean']:.1f} s a round (tables run concurrently).{_cut_share(result)} "
        "Its first round "
        f"(a new JVM, {s['tables']} full loads) ended {result['first_round_seconds']:.0f} s after it started. "
        f"Exit codes after SIGINT: {result['exit_codes']}.",
        "",
        where_the_time_goes(result),
    ]
    return "\n".join(lines)


def _cut_rows(result: dict[str, Any]) -> list[str]:
    """The consistent cut's rows of the lag table (a result stored before the cut was measured: none)."""
    published, age = result.get("cut_published_lag"), result.get("cut_age")
    if published is None or age is None:
        return []
    if not published or not age:
        return ["| the consistent cut (`cut:` lines of `run --follow`) | no cut published | | | |"]
    return [
        f"| the consistent cut, at its publishing (commit T → every table at T; {result['cuts_published']} cuts) | "
        f"{published['p50']:.1f} s | {published['p95']:.1f} s | {published['max']:.1f} s | |",
        f"| the consistent cut's age, sampled each second (now − T) | {age['p50']:.1f} s | {age['p95']:.1f} s | "
        f"{age['max']:.1f} s | |",
    ]


def _cut_share(result: dict[str, Any]) -> str:
    """What the rounds that published a cut spent on it, beside the round (a result stored before it
    was measured: nothing)."""
    settle, interval = result.get("cut_settle_seconds"), result["round_interval"]
    if not settle or not interval:
        return ""
    share = settle["p50"] / interval["p50"]
    return (
        f" A round that published a cut spent {settle['p50']:.2f} s on it (p50; p95 {settle['p95']:.2f} s, "
        f"`settled in` of its `cut:` line): {share:.1%} of the round's p50."
    )


def where_the_time_goes(result: dict[str, Any]) -> str:
    """The lag taken apart from the same run's figures: capture, the round, the per-table cost."""
    s, cap, app = result["settings"], result["capture_lag"], result["apply_lag"]
    round_p50 = result["round_interval"].get("p50", float("nan"))
    tables = result["round_tables_mean"] or float("nan")
    verdict = "Met" if result.get("met") else "Missed"
    per_table = result["round_table_seconds_mean"] / tables  # each table's own seconds, as run --follow prints them
    return (
        f"{verdict}; where the time goes: capture {cap['p50']:.1f} s at the median (a change waits for its "
        f"batch's {s['batch_interval']:g} s interval, counted from the batch's first change, plus a poll of up to "
        f"1 s), apply {app['p50']:.1f} s: about one round of `run --follow` ({round_p50:.1f} s for "
        f"{tables:.0f} tables, {round_p50 / tables:.2f} s a table; a file that lands during a round waits for "
        "the next one, whose tables commit one after another as the round goes on). A table's batch took "
        f"{per_table:.1f} s from start to commit, about {result['round_table_seconds_mean'] / round_p50:.1f} "
        "tables at once. The sampler's own pyiceberg "
        f"reads took {result['silver_scan_seconds']:.0f} s of the run ({result['silver_scans']} table reads), "
        "on the same 2 cores."
    )


def _command(s: dict[str, Any]) -> str:
    """How to run it again: the make target at its defaults, else the module with the options."""
    if (s["tables"], s["background_rate"], s["warmup_seconds"]) == (30, 10, 30.0):
        return f"make bench-freshness MINUTES={s['minutes']:g}"
    return (
        f"PYTHONPATH=glue .venv/bin/python -m bench.freshness --minutes {s['minutes']:g} --tables {s['tables']} "
        f"--rate {s['background_rate']} --warmup {s['warmup_seconds']:g}"
    )


def main(argv: list[str] | None = None) -> int:
    import argparse
    from datetime import datetime

    from bench.report import splice

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="measured load (default: %(default)s)")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds of load not counted (default: %(default)s)")
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--rate", type=int, default=10, help="background pgbench transactions a second (0: none)")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-freshness")
    parser.add_argument("--docs", type=Path, default=None, help="write the section into DOCS/benchmarks.md")
    parser.add_argument("--render-only", action="store_true", help="rewrite the section from DOCS' stored results")
    args = parser.parse_args(argv)
    if args.render_only:
        stored = json.loads((args.docs / "benchmarks-freshness.json").read_text())
        document = args.docs / "benchmarks.md"
        document.write_text(splice(document.read_text(), "freshness", render(stored, _command(stored["settings"]))))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("pyiceberg").setLevel(logging.WARNING)  # a line per table read
    settings = FreshnessSettings(
        minutes=args.minutes, warmup_seconds=args.warmup, tables=args.tables, background_rate=args.rate
    )
    started = time.perf_counter()
    result = measure(settings, args.workdir)
    result["wall_seconds"] = time.perf_counter() - started
    result["finished"] = datetime.now().strftime("%Y-%m-%d %H:%M")
    result["minutes_text"] = (
        f"Load for {settings.warmup_seconds:g} s (not counted: the new JVM's first rounds) then "
        f"{settings.minutes:g} min measured."
    )
    section = render(result, _command(result["settings"])) if result.get("lag") else json.dumps(result, indent=2)
    print(section)
    if args.docs:
        (args.docs / "benchmarks-freshness.json").write_text(json.dumps(result, indent=2) + "\n")
        document = args.docs / "benchmarks.md"
        document.write_text(splice(document.read_text(), "freshness", section))
    return 0 if result.get("lag") else 1


if __name__ == "__main__":
    raise SystemExit(main())

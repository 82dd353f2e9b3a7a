"""``cdclake demo``: the Airbnb hosts example, end to end on local Spark and Iceberg.

It writes a full load and several CDC batches as DMS files, applies them batch by batch, delivers
one batch again to show it is a no-op, prints the silver table, and compares it with the source
table the changes were made to, cleaned in plain Python.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterable
from datetime import date, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.dms.writer import (
    SourceChange,
    Value,
    cdc_file_name,
    cdc_records,
    change_sequence,
    load_file_name,
    write_csv,
)

if TYPE_CHECKING:
    from cdclake.context import Engine

COLUMNS = ("id", "url", "name", "since", "location", "response_time", "response_rate")
TIMESTAMP_COLUMN = "last_updated_ts"
TABLE_DIR = Path("public") / "hosts_demo"
LOAD_TIME = "2024-03-01 08:00:00.000000"

_HOSTS = [
    ("Anna", "2015-04-12", "Berlin, Germany", "within an hour", "100%"),
    ("Bruno", "2016-07-01", "Lisbon, Portugal", "within a few hours", "98%"),
    ("Chloe", "2014-01-20", "Paris, France", "within a day", "90%"),
    ("Dev", "2019-11-03", "Mumbai, India", None, None),
    ("Elif", "2018-05-17", "Istanbul, Turkey", "within an hour", "97%"),
    ("Femi", "2020-02-29", "Lagos, Nigeria", "a few days or more", "60%"),
    ("Greta", "2013-09-09", "Oslo, Norway", "within an hour", "100%"),
    ("Hiro", "2017-12-24", "Kyoto, Japan", "within a few hours", "95%"),
    ("Ines", "2021-06-30", "Madrid, Spain", "within a day", "88%"),
    ("Jon", "2012-03-15", "Reykjavik, Iceland", "within an hour", "99%"),
    ("Kaia", "2022-08-08", "Tallinn, Estonia", "", "75%"),
    ("Luis", "2016-10-10", "Mexico City, Mexico", "within a few hours", "93%"),
    ("Mia", "2019-01-01", "Vienna, Austria", "within an hour", "100%"),
    ("Nils", "2015-05-05", "Stockholm, Sweden", "within a day", "85%"),
    ("Olga", "2018-03-03", "Warsaw, Poland", "within an hour", "96%"),
    ("Pau", "2020-12-12", "Barcelona, Spain", "within a few hours", "91%"),
    ("Quinn", "2014-04-04", "Dublin, Ireland", "within a day", "80%"),
    ("Rosa", "2017-07-07", "Rome, Italy", "within an hour", "99%"),
    ("Sam", "2023-02-02", "Sydney, Australia", "within an hour", "100%"),
    ("Tariq", "2016-06-16", "Cairo, Egypt", "within a few hours", "94%"),
    ("Uma", "2019-09-19", "Bangalore, India", "within a day", "89%"),
    ("Vera", "2021-01-21", "Prague, Czechia", "within an hour", "98%"),
]


def _host(ident: int, name: str, since: str, location: str, rt: Value, rr: Value, ts: str) -> dict[str, Value]:
    return {
        "id": str(ident),
        "url": f"https://www.airbnb.com/users/show/{1000 + ident}",
        "name": name,
        "since": since,
        "location": location,
        "response_time": rt,
        "response_rate": rr,
        TIMESTAMP_COLUMN: ts,
    }


def initial_rows() -> list[dict[str, Value]]:
    return [_host(i + 1, *h, LOAD_TIME) for i, h in enumerate(_HOSTS)]


def cdc_batches() -> list[list[SourceChange]]:
    """The change log, one list per DMS CDC file, in commit order."""
    return _scenario()[0]


def final_source_rows() -> list[dict[str, Value]]:
    """The source table once every change of ``cdc_batches`` is committed."""
    return list(_scenario()[1].values())


def _scenario() -> tuple[list[list[SourceChange]], dict[Value, dict[str, Value]]]:
    """The change log and the source rows it leaves: each change is made to the source as written."""
    counter = iter(range(1, 10_000))
    rows = {r["id"]: r for r in initial_rows()}

    def change(op: str, ts: str, ident: int, **values: Value) -> SourceChange:
        key = str(ident)
        base = rows.get(key) or _host(ident, "", "2024-01-01", "Nowhere, Noland", None, None, ts)
        row = {**base, **values, TIMESTAMP_COLUMN: ts}
        if op == "D":
            rows.pop(key, None)
        else:
            rows[key] = row
        return SourceChange(op, row, ts, change_sequence(ts, next(counter)))

    batch1 = [  # inserts, updates, a delete
        change("I", "2024-03-01 09:00:00.000001", 23, name="Wen", since="2024-02-29", location="Taipei, Taiwan",
               response_time="within an hour", response_rate="100%"),
        change("I", "2024-03-01 09:00:01.000000", 24, name='Xavier "X" Ortiz', since="2024-03-01",
               location="Quito, Ecuador", response_time="within a day", response_rate="70%"),
        change("U", "2024-03-01 09:00:02.000000", 1, response_rate="99%"),
        change("U", "2024-03-01 09:00:03.000000", 4, response_time="within a day", response_rate="50%"),
        change("D", "2024-03-01 09:00:04.000000", 6),
    ]  # fmt: skip
    batch2 = [  # several changes to one key in one file; a key updated then deleted
        change("U", "2024-03-01 10:00:00.000000", 2, name="Bruno S."),
        change("U", "2024-03-01 10:00:01.000000", 2, location="Porto, Portugal"),
        change("U", "2024-03-01 10:00:02.000000", 2, response_time="within an hour"),
        change("U", "2024-03-01 10:00:03.000000", 3, name="Chloe, the host"),
        change("D", "2024-03-01 10:00:04.000000", 3),
        change("I", "2024-03-01 10:00:05.000000", 25, name="Yara", since="2024-03-01",
               location="Beirut, Lebanon", response_time=None, response_rate=None),
        change("U", "2024-03-01 10:00:06.000000", 24, name="Xavier\nOrtiz, jr."),
    ]  # fmt: skip
    # Two changes to one key in one transaction share a commit timestamp: only the change
    # sequence tells their order. They are written in reverse so row position cannot decide.
    tied_first = change("U", "2024-03-01 11:00:00.000000", 5, response_rate="90%")
    tied_second = change("U", "2024-03-01 11:00:00.000000", 5, response_rate="91%", name="Elif K.")
    batch3 = [
        tied_second,
        tied_first,
        change("D", "2024-03-01 11:00:01.000000", 25),
        change("I", "2024-03-01 11:00:02.000000", 6, name="Femi returns", since="2024-03-01",
               location="Accra, Ghana", response_time="within an hour", response_rate="100%"),
        change("U", "2024-03-01 11:00:03.000000", 7, response_time=""),
    ]  # fmt: skip
    return [batch1, batch2, batch3], rows


def write_full_load(bronze: Path, rows: list[dict[str, Value]], rows_per_file: int = 2) -> list[Path]:
    """Full-load files; 22 rows in pairs make 11 files, so the hex counter passes 9 (LOAD0000000A)."""
    paths = []
    for number, start in enumerate(range(0, len(rows), rows_per_file), start=1):
        chunk = rows[start : start + rows_per_file]
        records = [[r[TIMESTAMP_COLUMN], *[r[c] for c in COLUMNS], change_sequence(LOAD_TIME, 0)] for r in chunk]
        paths.append(write_csv(bronze / TABLE_DIR / load_file_name(number), records))
    return paths


def write_cdc_batch(bronze: Path, batch: list[SourceChange]) -> Path:
    name = cdc_file_name(max(c.commit_ts for c in batch))
    return write_csv(bronze / TABLE_DIR / name, cdc_records(batch, COLUMNS))


def expected_silver(source_rows: Iterable[dict[str, Value]]) -> list[dict[str, Any]]:
    """The seed's cleaning, in plain Python: source rows as silver should hold them."""
    result = []
    for row in source_rows:
        parts = re.split(r", *", row["location"]) if row["location"] is not None else [None, None]
        result.append(
            {
                TIMESTAMP_COLUMN: datetime.strptime(str(row[TIMESTAMP_COLUMN]), "%Y-%m-%d %H:%M:%S.%f"),
                "id": int(str(row["id"])),
                "url": row["url"],
                "name": row["name"],
                "since": date.fromisoformat(str(row["since"])),
                "response_time": row["response_time"],
                "response_rate": row["response_rate"],
                "location_city": parts[0],
                "location_country": parts[1] if len(parts) > 1 else None,
            }
        )
    return sorted(result, key=lambda r: r["id"])


def silver_rows(engine: Engine) -> list[dict[str, Any]]:
    from cdclake.columns import SILVER_ORDER

    table = engine.silver_table(engine.config.tables[0])
    frame = engine.spark.table(table.identifier).drop(SILVER_ORDER)  # the mirrored columns only
    return [r.asDict() for r in frame.orderBy("id").collect()]


def differences(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> list[str]:
    """Human-readable differences between silver and the oracle, keyed by id."""
    by_id_actual = {r["id"]: r for r in actual}
    by_id_expected = {r["id"]: r for r in expected}
    problems = []
    for ident in sorted(set(by_id_actual) | set(by_id_expected)):
        a, e = by_id_actual.get(ident), by_id_expected.get(ident)
        if a is None:
            problems.append(f"id {ident}: missing from silver")
        elif e is None:
            problems.append(f"id {ident}: in silver but not at the source")
        elif a != e:
            diff = {k: (a.get(k), e.get(k)) for k in e if a.get(k) != e.get(k)}
            problems.append(f"id {ident}: silver vs source {diff}")
    return problems


def redelivery_changes_nothing(engine: Engine, key: str) -> bool:
    """Apply the already applied CDC file ``key`` again, as a redelivered S3 event would, and print
    what was checked: the file was skipped (the ledger has it), no file was applied, and silver's
    current snapshot (an Iceberg snapshot never changes, so the same one means the same rows) and
    row count are what they were."""
    from cdclake.engine.run import apply_cdc_files
    from cdclake.engine.select import files_from_keys
    from cdclake.gold.snapshots import current_snapshot

    table = engine.silver_table(engine.config.tables[0])

    def state() -> tuple[int | None, int]:
        return current_snapshot(engine.spark, table), engine.spark.table(table.identifier).count()

    before = state()
    print(f"demo: delivering {key} again (as a redelivered S3 event would)")
    report = apply_cdc_files(engine, files_from_keys(engine.store, [key]))
    report.checked()
    applied = sum(t.files_applied for t in report.tables)
    skipped = sum(t.files_skipped for t in report.tables)
    after = state()
    if applied or after != before:
        print(
            f"demo: the redelivered file CHANGED silver: {applied} file(s) applied, "
            f"snapshot {before[0]} -> {after[0]}, rows {before[1]} -> {after[1]}"
        )
        return False
    print(
        f"demo: redelivery checked: {skipped} file skipped as already applied (the ledger has it), 0 applied, "
        f"silver still at snapshot {after[0]} with the same {after[1]} rows: OK"
    )
    return True


def run_demo(workdir: Path, make_engine: Callable[[Path, str], Engine]) -> int:
    """Run the demo in ``workdir`` (recreated); return 0 when silver equals the source state."""
    from cdclake.engine.run import run
    from cdclake.ops.status import table_statuses
    from cdclake.shells.demo_marts import refresh_demo_marts, verify_demo_marts
    from cdclake.shells.output import format_rows
    from cdclake.shells.status_view import compact_tables

    if workdir.exists():
        shutil.rmtree(workdir)
    bronze = workdir / "bronze"
    config_path = workdir / "hosts.yaml"
    workdir.mkdir(parents=True)
    config_path.write_text(resources.files("cdclake.examples").joinpath("hosts.yaml").read_text("utf-8"))
    print(f"demo: writing DMS files under {bronze}")
    write_full_load(bronze, initial_rows())
    engine = make_engine(config_path, str(bronze))
    print("demo: full load")
    run(engine).checked()
    refresh_demo_marts(engine)  # layer 3: the first refresh of a mart is a full one
    batches = cdc_batches()
    written = []
    for number, batch in enumerate(batches, start=1):
        written.append(write_cdc_batch(bronze, batch))
        print(f"demo: CDC batch {number} ({len(batch)} changes in {written[-1].name})")
        run(engine).checked()
    redelivered = str(written[0].relative_to(bronze))
    if not redelivery_changes_nothing(engine, redelivered):
        return 1

    actual = silver_rows(engine)
    columns = list(actual[0].keys()) if actual else []
    print(format_rows(columns, [list(r.values()) for r in actual], "table"), end="")
    print(compact_tables(table_statuses(engine)), end="")
    expected = expected_silver(final_source_rows())
    problems = differences(actual, expected)
    refresh_demo_marts(engine)  # after the CDC batches: only the groups whose hosts changed
    gold_failed = verify_demo_marts(engine)
    if problems:
        print("demo: silver DIFFERS from the expected source state:")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print(f"demo: silver equals the expected source state ({len(expected)} rows): OK")
    return gold_failed

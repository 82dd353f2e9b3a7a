"""The bad-input corpus: for every case, the exit code, one clear sentence, nothing applied that
should not be, nothing lost.

Each case is one table (``s.<name>``, key ``id``, one value column ``v``) with the bronze files
it is given. All cases share one warehouse database and one run, so the corpus costs one run
whatever its length; each case is then checked on its own: the exit code ``cdclake run --table
s.<name>`` would give (``RunReport.exit_code`` of its part of the report), what the CLI prints
for it, its silver rows and its quarantine entries. To add a case, add a ``Case`` to ``CASES``.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import cdclake.engine.prepare as prepare
from cdclake.context import Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import run
from cdclake.lake.journals import QUARANTINE_ROWS_TABLE, QUARANTINE_TABLE
from cdclake.report import RunReport
from cdclake.shells.commands.run import print_report
from run_outcome import run_state, table_reports

EngineFactory = Callable[..., Engine]

LOADED = "2024-05-01 00:00:00.000000"
TS = "2024-05-02 20:00:00.000000"
RATIO = 0.5  # quarantine.max_bad_row_ratio of the corpus: cases with bad rows keep below it, unless they test it


def rows_file(rows: list[list[str | None]]) -> Callable[[Path], None]:
    """A DMS CSV file with these records (as ``write_csv`` writes them)."""
    return lambda path: write_csv(path, rows) and None


def bytes_file(data: bytes) -> Callable[[Path], None]:
    """A file with exactly these bytes (a corrupt or hand-written file)."""
    return lambda path: path.write_bytes(data) and None


@dataclass(frozen=True)
class Case:
    name: str  # the table is s.<name>
    value_type: str  # the type of column v
    files: dict[str, Callable[[Path], None]]  # file name in the table's folder -> how to write it
    exit_code: int  # what `cdclake run --table s.<name>` exits with
    sentence: str  # printed for the table (its report lines on stdout, its problems on stderr)
    silver: dict[int, Any] | None  # id -> v afterwards (None: no silver table)
    rows_held: list[tuple[str, int, str]] = field(default_factory=list)  # (file, row, reason)
    raw: dict[tuple[str, int], str] = field(default_factory=dict)  # (file, row) -> the row as in the file
    files_held: list[tuple[str, str]] = field(default_factory=list)  # (file, start of the reason)
    clean: str = ""  # the table's clean: rules, YAML flow mapping


def _load(*values: tuple[int, str]) -> Callable[[Path], None]:
    return rows_file([[LOADED, str(i), v] for i, v in values])


CASES = [
    Case(
        "iso_order",  # ordered by the instant, not the text
        "string",
        {
            "LOAD00000001.csv": _load((1, "loaded")),
            "20240502-1900030000.csv": rows_file([["U", "2024-05-02T19:00:03Z", "1", "first"]]),
            "20240502-1930000000.csv": rows_file([["U", "2024-05-02T21:30:00.5+02:00", "1", "second"]]),
            "20240502-2000000000.csv": rows_file([["U", "2024-05-02 20:00:00.000000", "1", "third"]]),
        },
        exit_code=0,
        sentence="cdc       s.iso_order: files=3 skipped=0 inserted=0 updated=1 deleted=0 ignored_late=0",
        silver={1: "third"},
    ),
    Case(
        "null_ts",  # a NULL commit timestamp is a bad row, never late
        "string",
        {
            "LOAD00000001.csv": _load((1, "loaded"), (2, "loaded")),
            "20240502-2000000000.csv": rows_file([["U", TS, "1", "applied"], ["U", None, "2", "lost?"]]),
        },
        exit_code=1,
        sentence="s.null_ts: 1 row(s) held in quarantine, the rest applied; `cdclake quarantine list` shows them",
        silver={1: "applied", 2: "loaded"},
        rows_held=[("20240502-2000000000.csv", 2, "commit timestamp column ts is NULL")],
        raw={("20240502-2000000000.csv", 2): "U,,2,lost?"},
    ),
    Case(
        "bad_ts",  # a timestamp that does not parse
        "string",
        {
            "LOAD00000001.csv": _load((1, "loaded"), (2, "loaded")),
            "20240502-2000000000.csv": rows_file([["U", TS, "1", "applied"], ["U", "yesterday", "2", "x"]]),
        },
        exit_code=1,
        sentence="s.bad_ts: 1 row(s) held in quarantine",
        silver={1: "applied", 2: "loaded"},
        rows_held=[("20240502-2000000000.csv", 2, "value 'yesterday' of column ts is not a valid commit timestamp")],
    ),
    Case(
        "fraction_into_int",  # a value int cannot store exactly; raw is the row as it was in the file, not `2`
        "int",
        {"20240502-2000000000.csv": rows_file([["I", TS, "1", "3"], ["I", TS, "2", "2.7"], ["I", TS, "3", "4"]])},
        exit_code=1,
        sentence="s.fraction_into_int: 1 row(s) held in quarantine",
        silver={1: 3, 3: 4},
        rows_held=[
            (
                "20240502-2000000000.csv",
                2,
                "value '2.7' of column v cannot be stored exactly as int (clean.round rounds it)",
            )
        ],
        raw={("20240502-2000000000.csv", 2): f"I,{TS},2,2.7"},
    ),
    Case(
        "decimal_scale",  # a value decimal(10,2) cannot store exactly
        "decimal(10,2)",
        {"20240502-2000000000.csv": rows_file([["I", TS, "1", "12.30"], ["I", TS, "2", "12.345"]])},
        exit_code=1,
        sentence="s.decimal_scale: 1 row(s) held in quarantine",
        silver={1: Decimal("12.30")},
        rows_held=[
            (
                "20240502-2000000000.csv",
                2,
                "value '12.345' of column v cannot be stored exactly as decimal(10,2) (clean.round rounds it)",
            )
        ],
    ),
    Case(
        "decimal_rounded",  # the user opted into rounding
        "decimal(10,2)",
        {"20240502-2000000000.csv": rows_file([["I", TS, "1", "12.30"], ["I", TS, "2", "12.345"]])},
        exit_code=0,
        sentence="cdc       s.decimal_rounded: files=1 skipped=0 inserted=2 updated=0 deleted=0 ignored_late=0 "
        "rows_quarantined=0 files_quarantined=0",
        silver={1: Decimal("12.30"), 2: Decimal("12.35")},
        clean="{round: [v]}",
    ),
    Case(
        "no_op",  # a CDC file without Op is refused with the endpoint setting
        "string",
        {
            "LOAD00000001.csv": _load((1, "loaded")),
            "20240502-2000000000.csv": rows_file([[TS, "1", "changed"], [TS, "2", "new"]]),
        },
        exit_code=1,
        sentence="s.no_op: 1 file(s) held in quarantine (s/no_op/20240502-2000000000.csv has no Op column",
        silver={1: "loaded"},
        files_held=[("20240502-2000000000.csv", "s/no_op/20240502-2000000000.csv has no Op column")],
    ),
    Case(
        "bad_full_load_row",  # the careful path holds the row, loads the rest
        "int",
        {"LOAD00000001.csv": rows_file([[LOADED, "1", "10"], [LOADED, "2", "x"], [LOADED, "3", "30"]])},
        exit_code=1,
        sentence="s.bad_full_load_row: 1 row(s) held in quarantine, the rest applied",
        silver={1: 10, 3: 30},
        rows_held=[("LOAD00000001.csv", 2, "value 'x' of column v is not a valid int")],
        raw={("LOAD00000001.csv", 2): f"{LOADED},2,x"},
    ),
    Case(
        "above_ratio",  # the file is held, its reason names the rows, the setting and the fixes
        "int",
        {
            "LOAD00000001.csv": _load((1, "1")),
            "20240502-2000000000.csv": rows_file([["U", TS, "1", "1.5"], ["I", TS, "2", "two"]]),
        },
        exit_code=1,
        sentence="s.above_ratio: 1 file(s) held in quarantine (2 of 2 rows cannot be applied (data row 1: ",
        silver={1: 1},
        files_held=[
            (
                "20240502-2000000000.csv",
                "2 of 2 rows cannot be applied (data row 1: value '1.5' of column v cannot be stored exactly as int "
                "(clean.round rounds it); "
                "data row 2: value 'two' of column v is not a valid int), above quarantine.max_bad_row_ratio "
                f"{RATIO:g}: the file is held and the table's other files go on. Fix the file in bronze and run "
                "`cdclake replay --quarantined`, or raise quarantine.max_bad_row_ratio",
            )
        ],
    ),
    Case(
        "corrupt_parquet",  # the reason is Spark's innermost cause, not the py4j call that failed
        "string",
        {
            "LOAD00000001.csv": _load((1, "loaded")),
            "20240502-2000000000.parquet": bytes_file(b"PAR1 this is not a parquet file PAR1"),
            "20240502-2100000000.csv.gz": bytes_file(gzip.compress(f"U,{TS},1,fine\n".encode())),
        },
        exit_code=1,
        sentence="s.corrupt_parquet: 1 file(s) held in quarantine (unreadable file: corrupted file: the footer index",
        silver={1: "fine"},
        files_held=[("20240502-2000000000.parquet", "unreadable file: corrupted file: ")],
    ),
    # The per-row checks that held before this corpus existed: each row held with its reason.
    Case(
        "unknown_op",
        "string",
        {"20240502-2000000000.csv": rows_file([["I", TS, "1", "a"], ["X", TS, "2", "b"]])},
        exit_code=1,
        sentence="s.unknown_op: 1 row(s) held in quarantine, the rest applied",
        silver={1: "a"},
        rows_held=[("20240502-2000000000.csv", 2, "unknown Op 'X'")],
        raw={("20240502-2000000000.csv", 2): f"X,{TS},2,b"},
    ),
    Case(
        "null_key",
        "string",
        {"20240502-2000000000.csv": rows_file([["I", TS, "1", "a"], ["I", TS, None, "b"]])},
        exit_code=1,
        sentence="s.null_key: 1 row(s) held in quarantine",
        silver={1: "a"},
        rows_held=[("20240502-2000000000.csv", 2, "primary key column id is NULL")],
    ),
    Case(
        "extra_field",
        "string",
        {"20240502-2000000000.csv": bytes_file(f"I,{TS},1,a\nI,{TS},2,b,extra\n".encode())},
        exit_code=1,
        sentence="s.extra_field: 1 row(s) held in quarantine",
        silver={1: "a"},
        rows_held=[("20240502-2000000000.csv", 2, "wrong number of fields")],
        raw={("20240502-2000000000.csv", 2): f"I,{TS},2,b,extra"},
    ),
    Case(
        "not_utf8",
        "string",
        {"20240502-2000000000.csv": bytes_file(f"I,{TS},1,a\nI,{TS},2,".encode() + b"b\xff\n")},
        exit_code=1,
        sentence="s.not_utf8: 1 row(s) held in quarantine",
        silver={1: "a"},
        rows_held=[("20240502-2000000000.csv", 2, "bytes that are not valid UTF-8")],
    ),
    Case(
        "empty_file",
        "string",
        {"LOAD00000001.csv": _load((1, "loaded")), "20240502-2000000000.csv": bytes_file(b"")},
        exit_code=1,
        sentence="s.empty_file: 1 file(s) held in quarantine (empty file)",
        silver={1: "loaded"},
        files_held=[("20240502-2000000000.csv", "empty file")],
    ),
]


def _config() -> str:
    tables = "".join(
        f'  s.{c.name}: {{primary_key: [id], columns: {{id: int, v: "{c.value_type}"}}'
        + (f", clean: {c.clean}" if c.clean else "")
        + "}\n"
        for c in CASES
    )
    return f"bronze: {{timestamp_column: ts}}\nquarantine: {{max_bad_row_ratio: {RATIO}}}\ntables:\n{tables}"


@pytest.fixture(scope="module")
def corpus(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Engine, RunReport]:
    """Every case's files in one bronze, one run over all of them (small batches in the driver where
    it takes them: ``DRIVER_TOOK`` says which did)."""
    from dataclasses import replace

    from cdclake.config import parse_config
    from cdclake.dms.store import LocalBronze

    bronze = tmp_path_factory.mktemp("corpus") / "bronze"
    for case in CASES:
        for name, write in case.files.items():
            (bronze / "s" / case.name).mkdir(parents=True, exist_ok=True)
            write(bronze / "s" / case.name / name)
    config = parse_config(_config(), "corpus.yaml")
    config = replace(config, database="bad_input_corpus", bronze=replace(config.bronze, path=str(bronze)))
    engine = Engine(spark=spark, config=config, store=LocalBronze(bronze))
    prepare_in_driver = prepare.prepare_in_driver

    def noting(batch: Any, files: Any) -> Any:
        prepared = prepare_in_driver(batch, files)
        DRIVER_TOOK.append(prepared is not None)
        return prepared

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prepare, "prepare_in_driver", noting)
        return engine, run(engine)


# Whether the driver prepared each CDC batch of the corpus's run (``engine.driver_batch``).
DRIVER_TOOK: list[bool] = []


def _journal(engine: Engine, name: str, source_table: str) -> list[Any]:
    identifier = f"silver.{engine.config.database}.{name}"
    if not engine.spark.catalog.tableExists(identifier):
        return []
    return engine.spark.table(identifier).where(f"silver_table = '{source_table}'").collect()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_held_or_refused_and_nothing_else_changes(
    corpus: tuple[Engine, RunReport], case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    engine, report = corpus
    source, folder = f"s.{case.name}", f"s/{case.name}/"
    mine = report.of_table(source)
    # THEN the exit code and the sentence are the CLI's for this table
    capsys.readouterr()
    assert print_report(mine) == case.exit_code
    printed = capsys.readouterr()
    assert case.sentence in printed.out + printed.err, printed
    # AND silver holds exactly what should be applied
    silver = f"silver.{engine.config.database}.{case.name}"
    if case.silver is None:
        assert not engine.spark.catalog.tableExists(silver)
    else:
        assert {r["id"]: r["v"] for r in engine.spark.table(silver).collect()} == case.silver
    # AND everything not applied is in quarantine with its reason (nothing lost)
    rows = _journal(engine, QUARANTINE_ROWS_TABLE, case.name)
    assert sorted((r["file_key"], r["row_number"], r["reason"]) for r in rows) == [
        (folder + f, n, why) for f, n, why in case.rows_held
    ]
    raw = {(r["file_key"], r["row_number"]): r["raw"] for r in rows}
    for (file, number), text in case.raw.items():
        assert raw[(folder + file, number)] == text
    files = sorted((r["file_key"], r["reason"]) for r in _journal(engine, QUARANTINE_TABLE, case.name))
    assert [key for key, _ in files] == [folder + f for f, _ in case.files_held]
    for (_, reason), (_, start) in zip(files, case.files_held, strict=True):
        assert reason.startswith(start), reason
        assert "An error occurred while calling" not in reason


def test_the_spark_path_gives_the_corpus_the_outcome_the_driver_gave(corpus: tuple[Engine, RunReport]) -> None:
    # GIVEN the corpus's run, whose batches without a bad row the driver prepared (the others, Spark)
    engine, report = corpus
    assert any(DRIVER_TOOK) and not all(DRIVER_TOOK), DRIVER_TOOK
    # WHEN an engine that prepares every batch with Spark runs the same bronze into another database
    from dataclasses import replace

    spark_only = replace(engine, config=replace(engine.config, database="bad_input_corpus_spark"))
    spark_report = run(spark_only.tuned(driver_read_bytes=0))
    # THEN every table's report, silver and quarantine are the same
    assert table_reports(spark_report) == table_reports(report)
    assert run_state(spark_only) == run_state(engine)

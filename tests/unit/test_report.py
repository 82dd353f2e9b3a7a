"""report.py: what a run did, its exit code and the sentences the CLI prints (pure).

The time line and the progress line have files of their own (test_run_time_line.py, test_progress.py).
"""

from __future__ import annotations

import pytest

from cdclake.errors import BronzeError, ConcurrentWriterError, TablesFailedError
from cdclake.report import Backlog, Outcome, OutcomeKind, RunReport, TableFailure, TableReport


def failure(table: str, error: Exception) -> TableFailure:
    return TableFailure(table, "cdc", error)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        pytest.param(ConcurrentWriterError("lost the race"), 75, id="another-writer"),
        pytest.param(BronzeError("no such file"), 2, id="user-can-fix"),
        pytest.param(RuntimeError("boom"), 1, id="fault"),
    ],
)
def test_a_failed_tables_exit_code_by_kind_of_error(error: Exception, code: int) -> None:
    assert failure("s.t", error).exit_code == code
    assert RunReport(failures=[failure("s.t", error)]).exit_code == code


def test_a_run_exits_with_the_gravest_failure_a_fault_before_a_fix_before_a_retry() -> None:
    retry = failure("s.a", ConcurrentWriterError("x"))
    fix = failure("s.b", BronzeError("x"))
    fault = failure("s.c", RuntimeError("x"))

    assert RunReport(failures=[retry, fix, fault]).exit_code == 1
    assert RunReport(failures=[retry, fix]).exit_code == 2
    assert RunReport(failures=[retry]).exit_code == 75


def test_a_run_that_set_files_or_rows_aside_exits_1_and_a_clean_one_0() -> None:
    assert RunReport(tables=[TableReport("s.t", "cdc", files_applied=3)]).exit_code == 0
    assert RunReport(tables=[TableReport("s.t", "cdc", rows_quarantined=1)]).exit_code == 1
    assert RunReport(tables=[TableReport("s.t", "cdc", quarantined_files=["k"])]).exit_code == 1


def test_a_failure_summary_is_the_first_line_of_the_error_or_its_type() -> None:
    assert failure("s.t", BronzeError("first line\nsecond")).summary() == "cdc       s.t: failed: first line"
    assert failure("s.t", RuntimeError("")).summary() == "cdc       s.t: failed: RuntimeError"


def test_problems_say_per_table_what_was_held_and_why_then_each_failure() -> None:
    report = RunReport(
        tables=[
            TableReport("s.a", "cdc", quarantined_files=["k1"], outcome=Outcome.held("bad header")),
            TableReport("s.a", "cdc", quarantined_files=["k2", "k3"], outcome=Outcome.held("bad header")),
            TableReport("s.b", "cdc", rows_quarantined=4),
            TableReport("s.c", "cdc", files_applied=1),
        ],
        failures=[failure("s.d", BronzeError("gone"))],
    )

    assert report.problems() == [
        "s.a: 3 file(s) held in quarantine (bad header); fix them in bronze, then `cdclake replay --quarantined` "
        "(`cdclake quarantine list` shows them)",
        "s.b: 4 row(s) held in quarantine, the rest applied; `cdclake quarantine list` shows them and why; "
        "fix them in bronze, then `cdclake replay --quarantined`",
        "s.d: gone",
    ]


def test_checked_raises_a_single_failure_as_itself_and_several_as_one_naming_each() -> None:
    own = BronzeError("missing")
    with pytest.raises(BronzeError) as single:
        RunReport(failures=[failure("s.a", own)]).checked()
    assert single.value is own

    with pytest.raises(TablesFailedError) as several:
        RunReport(failures=[failure("s.a", own), failure("s.b", RuntimeError("boom"))]).checked()
    assert str(several.value) == "2 tables failed; the others were applied: s.a: failed: missing; s.b: failed: boom"
    assert several.value.__cause__ is own

    clean = RunReport(tables=[TableReport("s.a", "cdc")])
    assert clean.checked() is clean


def test_of_table_keeps_only_that_tables_reports_and_failures() -> None:
    report = RunReport(
        tables=[TableReport("s.a", "cdc", inserted=1), TableReport("s.b", "cdc", inserted=2)],
        failures=[failure("s.b", RuntimeError("x"))],
        unconfigured=["s.z"],
    )

    part = report.of_table("s.b")

    assert [t.inserted for t in part.tables] == [2]
    assert [f.table for f in part.failures] == ["s.b"]
    assert part.unconfigured == []


def test_loads_pending_names_each_table_the_cdc_lane_left_to_the_full_load_lane() -> None:
    report = RunReport(
        tables=[
            TableReport("s.a", "cdc", outcome=Outcome.load_pending("a reload")),
            TableReport("s.b", "cdc", files_applied=1),
        ]
    )

    assert report.loads_pending == {"s.a": "a reload"}


def test_no_files_line_speaks_of_one_table_or_several() -> None:
    assert RunReport().no_files_line() is None
    one = RunReport(no_files=["s.a"]).no_files_line()
    several = RunReport(no_files=["s.a", "s.b"]).no_files_line()
    assert one is not None and one.startswith("no files yet for s.a: bronze holds no LOAD or CDC file of it,")
    assert several is not None
    assert several.startswith("no files yet for s.a, s.b: bronze holds no LOAD or CDC file of them,")


def test_a_table_report_summary_has_every_count_and_the_note() -> None:
    batch = TableReport(
        "s.a", "cdc", files_applied=2, files_skipped=1, inserted=3, updated=4, deleted=5, ignored_late=6,
        rows_quarantined=7, quarantined_files=["k"], seconds=1.25,
        outcome=Outcome.held("bad header"),
    )  # fmt: skip

    assert batch.summary() == (
        "cdc       s.a: files=2 skipped=1 inserted=3 updated=4 deleted=5 ignored_late=6 rows_quarantined=7 "
        "files_quarantined=1 1.2s (quarantined: bad header)"
    )


def test_a_backlog_cannot_be_negative() -> None:
    assert Backlog(0, 0) == Backlog(files=0, bytes=0)
    with pytest.raises(ValueError, match="a backlog cannot be negative: files=-1 bytes=0"):
        Backlog(-1, 0)
    with pytest.raises(ValueError, match="files=0 bytes=-5"):
        Backlog(0, -5)


def test_an_outcome_is_said_in_the_same_words_as_before_it_was_a_value() -> None:
    # GIVEN each outcome a table's load or batch can have, WHEN it is put in words, THEN the sentences are the ones
    # the CLI and the logs have always printed
    assert Outcome().note == ""
    assert Outcome(OutcomeKind.NOTHING_NEW).note == "nothing new"
    assert Outcome(OutcomeKind.ALREADY_LOADED).note == "already loaded"
    assert Outcome(OutcomeKind.LOADED_AGAIN, "a reload: LOAD files written again").note == (
        "a reload: LOAD files written again"
    )
    assert Outcome.load_pending("a reload").note == "load pending in the full-load lane, CDC held until then: a reload"
    assert Outcome.held("empty file").note == "quarantined: empty file"
    assert Outcome(OutcomeKind.CREATED_EMPTY, "s/a").note == (
        "nothing loaded: bronze has no LOAD file under s/a/ (a table empty at the source gets none); "
        "created empty, its CDC files apply to it"
    )
    assert Outcome(OutcomeKind.LEFT_TO_CDC, "s/a").note == (
        "nothing loaded: bronze has no LOAD file under s/a/ (a table empty at the source gets none); "
        "without declared columns the table is created by its first CDC batch"
    )
    # AND only a pending load says why through ``load_pending``
    assert TableReport("s.a", "full-load", outcome=Outcome.load_pending("a reload")).load_pending == "a reload"
    assert TableReport("s.a", "cdc", outcome=Outcome.held("a reload")).load_pending is None


def test_the_advice_for_held_files_follows_the_outcome_kind_not_its_words() -> None:
    # GIVEN a batch held for a type change, and one held for a reason worded like a type change
    report = RunReport(
        tables=[
            TableReport(
                "s.a", "cdc", quarantined_files=["k1"], outcome=Outcome.held("v is now text", type_change=True)
            ),
            TableReport(
                "s.b", "cdc", quarantined_files=["k2"], outcome=Outcome.held("column v changed type from a to b")
            ),
        ]
    )
    # WHEN the problems are said
    held_for_type, held_otherwise = report.problems()
    # THEN the type change's advice is a reload, the other's a fix in bronze
    assert held_for_type.startswith("s.a: 1 file(s) held in quarantine (v is now text); a type change silver cannot")
    assert "--reload" in held_for_type
    assert held_otherwise == (
        "s.b: 1 file(s) held in quarantine (column v changed type from a to b); fix them in bronze, then "
        "`cdclake replay --quarantined` (`cdclake quarantine list` shows them)"
    )

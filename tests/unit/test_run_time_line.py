"""A run ends with one line saying where its time went."""

from __future__ import annotations

from cdclake.report import RunReport, TableReport


def test_the_time_line_names_each_phase_with_its_tables_and_the_total() -> None:
    # GIVEN a run that loaded two tables (one in two batches would count once) and applied CDC to three
    reports = [TableReport("s.a", "full-load"), TableReport("s.b", "full-load")]
    reports += [TableReport(t, "cdc") for t in ("s.a", "s.a", "s.b", "s.c")]
    report = RunReport(tables=reports, phase_seconds={"full loads": 12.04, "CDC": 8.2})
    # WHEN its time line is written for 4.1 s of start-up and 25.6 s in all
    line = report.time_line(start_up=4.1, total=25.6)
    # THEN each phase, its tables, the rest and the total are in it, in the order they happened
    assert line == (
        "time: start-up 4.1 s, full loads 12.0 s (2 tables), CDC 8.2 s (3 tables), other 1.3 s; total 25.6 s"
    )


def test_a_run_with_nothing_to_do_says_so_in_its_time_line() -> None:
    line = RunReport(phase_seconds={"full loads": 0.0, "CDC": 0.0}).time_line(start_up=3.0, total=3.0)
    assert line == "time: start-up 3.0 s, full loads 0.0 s (0 tables), CDC 0.0 s (0 tables); total 3.0 s"

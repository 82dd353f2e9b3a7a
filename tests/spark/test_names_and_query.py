"""A table DMS can write but plain identifiers cannot name (``inventory.order-items``, columns with a
hyphen and a space) goes through full load, CDC, history, maintenance, status and query; and
``query`` prints what silver holds: NULL apart from the empty string, booleans as true/false,
timestamps Python cannot hold, Spark's reason for a bad statement."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cdclake.context import Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import run
from cdclake.errors import CdclakeError
from cdclake.ops.maintenance import MaintenanceSettings, maintain_table
from cdclake.ops.status import table_statuses
from cdclake.shells.demo import redelivery_changes_nothing
from cdclake.shells.query import run_query
from cdclake.shells.status_view import compact_tables

EngineFactory = Callable[..., Engine]

ORDER_ITEMS = """
bronze: {timestamp_column: commit_ts}
tables:
  inventory.order-items:
    primary_key: [id]
    history: true
    columns: {id: int, order-id: int, unit price: 'decimal(10,2)', note: string, paid: boolean, shipped at: timestamp}
  inventory.stock levels:
    primary_key: [item-id]
    layout: bucket
    columns: {item-id: int, on hand: int}
"""


def test_a_hyphenated_table_through_load_cdc_maintenance_status_and_query(
    make_engine: EngineFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN inventory.order-items with a full load and one CDC file (update, insert, delete), a
    # NULL note beside an empty one, and a shipping time in the year 10000 (accepted at load)
    engine = make_engine(ORDER_ITEMS)
    folder = tmp_path / "bronze" / "inventory" / "order-items"
    write_csv(
        folder / "LOAD00000001.csv",
        [
            ["2024-01-01 00:00:00.000000", "1", "10", "2.50", None, "true", "2024-01-02 10:00:00"],
            ["2024-01-01 00:00:00.000000", "2", "10", "3.00", "", "false", "+10000-01-01 00:00:00"],
            ["2024-01-01 00:00:00.000000", "3", "11", "1.25", "gift", "false", None],
        ],
    )
    cdc = write_csv(
        folder / "20240102-0000010000.csv",
        [
            ["U", "2024-01-02 00:00:01.000000", "1", "10", "2.75", 'say "hi", then go', "true", None],
            ["I", "2024-01-02 00:00:02.000000", "4", "12", "9.99", None, None, None],
            ["D", "2024-01-02 00:00:03.000000", "3", "11", "1.25", "gift", "false", None],
        ],
    )
    stock = tmp_path / "bronze" / "inventory" / "stock levels"
    write_csv(
        stock / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "7", "1"], ["2024-01-01 00:00:00.000000", "8", "2"]]
    )
    write_csv(stock / "20240102-0000010000.csv", [["U", "2024-01-02 00:00:01.000000", "7", "5"]])
    # WHEN it is loaded and its CDC applied (the bucketed table through the branch-staged commit),
    # then maintained
    run(engine.tuned(merge_below_records=0)).checked()
    table = engine.config.tables[0]
    maintained = maintain_table(engine, table, MaintenanceSettings())
    # THEN silver has the source's rows, queried with the names quoted
    db = engine.config.database
    columns = "id, `order-id`, `unit price`, note, paid, `shipped at`"
    csv = run_query(engine.spark, f"SELECT {columns} FROM {db}.`order-items` ORDER BY id", "csv", None)
    assert csv.note is None
    assert csv.text.splitlines()[1:] == [
        '1,10,2.75,"say ""hi"", then go",true,',
        '2,10,3.00,"",false,+10000-01-01 00:00:00',  # the empty string is "", NULL an empty field
        "4,12,9.99,,,",
    ]
    assert csv.text.splitlines()[0] == "id,order-id,unit price,note,paid,shipped at"
    on_hand = f"SELECT `item-id`, `on hand` FROM {db}.`stock levels` ORDER BY `item-id`"
    assert run_query(engine.spark, on_hand, "csv", None).text.splitlines()[1:] == ["7,5", "8,2"]
    # AND the history table and the Iceberg procedures took the name
    history = f"SELECT id, operation, `unit price` FROM {db}.`order-items__history` ORDER BY id, valid_from"
    assert run_query(engine.spark, history, "csv", None).text.splitlines()[1:] == [
        "1,I,2.50",
        "1,U,2.75",
        "2,I,3.00",
        "3,I,1.25",
        "3,D,1.25",
        "4,I,9.99",
    ]
    assert maintained is not None and maintained.snapshots_expired == 0
    # AND the status shows it up to date, in the compact view too
    status = table_statuses(engine)[0]
    assert (status.silver_table, status.rows, status.files_applied, status.behind) == (
        f"{db}.order-items",
        3,
        2,
        "up to date",
    )
    line = compact_tables([status]).splitlines()[1]
    assert line.split()[:4] == ["inventory.order-items", "3", "2", "0"]
    assert line.endswith("d 0h  up to date") or line.endswith("h  up to date")  # the lag since 2024, then the state
    # AND a redelivered CDC file changes nothing, and the check says what it looked at
    capsys.readouterr()
    assert redelivery_changes_nothing(engine, str(cdc.relative_to(tmp_path / "bronze")))
    said = capsys.readouterr().out.splitlines()[-1]
    assert said.startswith("demo: redelivery checked: 1 file skipped as already applied (the ledger has it), 0 applied")
    assert said.endswith("with the same 3 rows: OK")


def test_query_output_is_never_cut_silently_and_failures_say_why(make_engine: EngineFactory) -> None:
    # GIVEN 1001 rows
    spark = make_engine(ORDER_ITEMS).spark
    sql = "SELECT id FROM range(1001)"
    # WHEN exported as CSV or JSON without --limit / THEN every row is there and nothing is said
    assert len(run_query(spark, sql, "csv", None).text.splitlines()) == 1002
    exported = run_query(spark, sql, "json", None)
    assert (len(exported.text.splitlines()), exported.note) == (1001, None)
    # WHEN the table view or --limit cuts it / THEN the note (stderr) says so
    shown = run_query(spark, sql, "table", None)
    assert shown.text.splitlines()[-1] == "(1000 rows)"
    assert shown.note == "only the first 1000 rows are printed (the table view's default); --limit 0 prints them all"
    assert run_query(spark, sql, "csv", 5).note == "only the first 5 rows are printed (--limit 5); more rows match"
    assert run_query(spark, "SELECT id FROM range(5)", "csv", 5).note is None
    # AND a statement Spark refuses gives its reason in one sentence
    with pytest.raises(CdclakeError) as parse:
        run_query(spark, "SELEC 1", "table", None)
    assert (
        str(parse.value)
        == "The query failed: [PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC' (line 1, position 0)"
    )
    with pytest.raises(CdclakeError) as missing:
        run_query(spark, "SELECT nope FROM range(1)", "table", None)
    assert str(missing.value).startswith("The query failed: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column or function")
    assert str(missing.value).endswith("(line 1, position 7)")
    with pytest.raises(CdclakeError) as failed:
        run_query(spark, "SELECT assert_true(id < 0, 'ids must be negative') FROM range(1)", "csv", None)
    assert str(failed.value) == "The query failed: ids must be negative"
    # AND a timestamp, date or array of timestamps Python cannot hold prints as Spark writes it
    far = run_query(
        spark,
        "SELECT make_timestamp(10000, 1, 2, 3, 4, 5) AS t, make_date(10000, 1, 1) AS d, "
        "array(make_timestamp(10000, 1, 2, 3, 4, 5)) AS a",
        "json",
        None,
    )
    assert far.text == '{"t": "+10000-01-02 03:04:05", "d": "+10000-01-01", "a": "[+10000-01-02 03:04:05]"}\n'

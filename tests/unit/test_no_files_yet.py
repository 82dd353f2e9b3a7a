"""Nothing ends "up to date" while nothing has arrived: a configured table without a file in bronze
says "no files yet" (in status) and `run` says it loaded nothing and why."""

from __future__ import annotations

from cdclake.config import parse_config
from cdclake.dms.files import classify
from cdclake.ops.table_status import NO_FILES, TableStatus, no_files_yet
from cdclake.report import RunReport
from cdclake.shells.status_view import compact_tables, table_state

TABLE = parse_config("tables:\n  shop.orders: {primary_key: [id], columns: {id: int}}\n").tables[0]


def test_a_table_nothing_arrived_for_has_no_files_yet_and_says_where_it_looked() -> None:
    # GIVEN a configured table: bronze holds no file of it, and none was ever applied
    # WHEN its status reason is worked out
    reason = no_files_yet(TABLE, in_bronze=False, files_applied=0)
    # THEN it is "no files yet", naming the folder looked in and the likely causes
    assert reason is not None and reason.startswith(f"{NO_FILES}: bronze has no LOAD or CDC file under shop/orders/")
    assert "empty at the source" in reason and "cdclake capture" in reason


def test_a_table_a_file_arrived_for_is_not_no_files_yet() -> None:
    # GIVEN a file in bronze, or files applied earlier (bronze cleaned since) THEN the usual reasons apply
    assert no_files_yet(TABLE, in_bronze=True, files_applied=0) is None
    assert no_files_yet(TABLE, in_bronze=False, files_applied=3) is None


def test_a_loaded_empty_table_without_files_is_never_shown_up_to_date() -> None:
    # GIVEN a table the full load created empty (declared columns, no LOAD file): it exists, 0 rows
    behind = no_files_yet(TABLE, in_bronze=False, files_applied=0)
    assert behind is not None
    status = TableStatus("shop.orders", "shop.orders", exists=True, rows=0, files_applied=0, behind=behind)
    # WHEN the compact view is rendered
    lines = compact_tables([status]).splitlines()
    # THEN its state is "no files yet", not "up to date", and the reason follows below
    assert table_state(status) == NO_FILES
    assert lines[1].endswith(NO_FILES) and "up to date" not in lines[1]
    assert lines[-1] == f"shop.orders: {behind}"
    # AND a table never created with nothing in bronze says the same
    assert table_state(TableStatus("shop.orders", "shop.orders", exists=False, behind=behind)) == NO_FILES


def test_run_says_which_tables_it_loaded_nothing_for_and_why() -> None:
    # GIVEN a run that found no file for two configured tables, and one that found files for all
    # THEN it says which tables, that nothing was loaded, and why; and nothing when files arrived
    line = RunReport(no_files=["shop.orders", "shop.items"]).no_files_line()
    assert line is not None
    assert line.startswith("no files yet for shop.orders, shop.items: bronze holds no LOAD or CDC file of them")
    assert "nothing was loaded" in line
    assert RunReport().no_files_line() is None


def test_a_transaction_file_may_hold_rows_of_any_table() -> None:
    # GIVEN bronze with one table's own file, and a multi-table (transaction) file
    own = classify([("shop/items/LOAD00000001.csv", 10)])
    with_transactions = classify([("changes/20240101-0000000000.csv", 10)], transaction_path="changes")
    # THEN another table has no files in the first, but may have rows in the second
    assert own.may_hold("shop", "items") and not own.may_hold("shop", "orders")
    assert with_transactions.may_hold("shop", "orders")

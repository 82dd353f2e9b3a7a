"""The verify job's pure core (cdclake.verify.log, verify.dialects.conninfo, shells.glue_job.job_run_id):
the cdclake_verify rows built from comparisons, the run's summary and metric data, the source's libpq string and
the run id. No Spark, no AWS."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg2.extensions
import pytest

from cdclake.errors import ConfigError
from cdclake.shells.glue_job import job_run_id, parse_arguments
from cdclake.sources.catalog.connect import SourceAddress
from cdclake.verify.dialects import conninfo
from cdclake.verify.job import TableVerified
from cdclake.verify.log import SAMPLE_KEYS, summary_of, verify_metric_data, verify_rows
from cdclake.verify.result import TableComparison

T0 = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)


def _verified(comparison: TableComparison, seconds: int = 2, position: str | None = None) -> TableVerified:
    return TableVerified(comparison, T0, T0 + timedelta(seconds=seconds), position)


def test_an_equal_table_is_one_row_with_its_counts_and_no_keys() -> None:
    # GIVEN a table proved equal by checksums
    equal = TableComparison(
        table="public.items", source_rows=3000, silver_rows=3000, method="checksums", ranges=64, rows_read=0
    )
    # WHEN its row is built
    [row] = verify_rows("jr_1", [_verified(equal)])
    # THEN the row says so, field by field
    assert (row.run_id, row.source_table) == ("jr_1", "public.items")
    assert (row.started, row.finished) == (T0, T0 + timedelta(seconds=2))
    assert (row.method, row.ranges_compared, row.ranges_differing, row.rows_read) == ("checksums", 64, 0, 0)
    assert (row.source_rows, row.silver_rows, row.rows_differing) == (3000, 3000, 0)
    assert (row.verdict, row.problem, row.source_position, json.loads(row.sample_keys)) == ("equal", None, None, [])


def test_a_differing_table_names_each_key_with_its_kind_and_columns() -> None:
    # GIVEN a table with one row of each kind of difference
    differing = TableComparison(
        table="public.items", source_rows=10, silver_rows=10, method="checksums", ranges=8, ranges_differing=2,
        rows_read=40, missing=["id=3001"], unexpected=["id=5"], different=["id=10", "id=21"],
        differing_columns={"id=10": ["price"], "id=21": ["note", "at"]}, unlogged_defaults=["id=7"],
    )  # fmt: skip
    # WHEN its row is built
    [row] = verify_rows("jr_1", [_verified(differing, position="0/16B3748")])
    # THEN it counts every differing key and lists them, missing first, with the columns of those that differ
    assert (row.verdict, row.rows_differing, row.ranges_differing, row.rows_read) == ("differing", 5, 2, 40)
    assert json.loads(row.sample_keys) == [
        {"key": "id=3001", "kind": "missing", "columns": []},
        {"key": "id=5", "kind": "unexpected", "columns": []},
        {"key": "id=10", "kind": "different", "columns": ["price"]},
        {"key": "id=21", "kind": "different", "columns": ["note", "at"]},
        {"key": "id=7", "kind": "default_not_in_silver", "columns": []},
    ]
    assert row.source_position == "0/16B3748"


def test_sample_keys_keep_the_first_twenty_and_the_count_keeps_them_all() -> None:
    many = TableComparison(table="s.t", different=[f"id={i}" for i in range(50)], differing_columns={})
    [row] = verify_rows("r", [_verified(many)])
    keys = json.loads(row.sample_keys)
    assert row.rows_differing == 50 and len(keys) == SAMPLE_KEYS == 20
    assert [k["key"] for k in keys] == [f"id={i}" for i in range(20)]


def test_a_table_that_could_not_be_compared_is_skipped_with_its_reason() -> None:
    [row] = verify_rows("r", [_verified(TableComparison(table="s.t", problem="no silver table"))])
    assert (row.verdict, row.problem, row.rows_differing) == ("skipped", "no silver table", 0)


def test_the_summary_and_its_metrics_count_tables_and_rows() -> None:
    # GIVEN a run of five tables: equal, differing by 3 keys, differing by 1 key, skipped, lagging
    comparisons = [
        TableComparison(table="s.a"),
        TableComparison(table="s.b", missing=["id=1"], unexpected=["id=2"], different=["id=3"]),
        TableComparison(table="s.c", unlogged_defaults=["id=9"]),
        TableComparison(table="s.d", problem="no such table at the source"),
        TableComparison(table="s.e", lagging="newest change applied 40 s before verify started"),
    ]
    rows = verify_rows("r", [_verified(c) for c in comparisons])
    # WHEN summarised
    summary = summary_of(rows)
    # THEN
    assert (summary.tables_compared, summary.tables_differing, summary.rows_differing, summary.tables_skipped) == (
        4, 2, 4, 1,
    )  # fmt: skip
    assert summary.tables_lagging == 1 and [r.verdict for r in rows][-1] == "lagging"
    data = verify_metric_data(summary, "prod", T0)
    assert {d["MetricName"]: d["Value"] for d in data} == {
        "TablesDiffering": 2.0, "RowsDiffering": 4.0, "TablesSkipped": 1.0, "TablesVerified": 4.0,
        "TablesLagging": 1.0,
    }  # fmt: skip
    assert all(d["Dimensions"] == [{"Name": "Environment", "Value": "prod"}] and d["Timestamp"] == T0 for d in data)


def test_the_source_address_becomes_a_libpq_string_psycopg2_reads_back_exactly() -> None:
    # GIVEN an address whose password holds quotes, backslashes and spaces, and a sslmode from the JDBC URL
    address = SourceAddress(
        engine="postgres", host="db.example.com", port=6432, database="shop", user="reader",
        password="a b'c\\d=", options=(("sslmode", "require"),),
    )  # fmt: skip
    # WHEN written as a conninfo string THEN libpq's own parser reads every value back as it was
    parsed = psycopg2.extensions.parse_dsn(conninfo(address, timeout=15))
    assert parsed == {
        "host": "db.example.com", "port": "6432", "dbname": "shop", "user": "reader", "password": "a b'c\\d=",
        "sslmode": "require", "connect_timeout": "15",
    }  # fmt: skip


def test_the_run_id_is_glues_without_the_attempt_suffix_and_new_outside_glue() -> None:
    argv = ["verify.py", "--JOB_RUN_ID", "jr_0123abc_attempt_2", "--config", "c"]
    assert job_run_id(argv) == "jr_0123abc"
    assert job_run_id(["verify.py", "--JOB_RUN_ID", "jr_0123abc"]) == "jr_0123abc"
    first, second = job_run_id(["verify.py"]), job_run_id(["verify.py"])
    assert first.startswith("local_") and first != second


COMMON = ["--config", "s3://a/config/cdclake.yaml", "--bronze", "s3://b/dms", "--warehouse", "s3://s/warehouse"]


def test_the_verify_job_reads_its_source_tables_and_metrics_and_nothing_else() -> None:
    argv = ["verify.py", *COMMON, "--secret_id", "cdclake/source", "--source_connection", "db", "--dbname", "shop",
            "--source_engine", "postgres", "--tables", "s.a, s.b", "--metrics_namespace", "cdclake",
            "--environment", "prod", "--table_metrics", "s.a", "--reload", "true", "--queue_url", "q"]  # fmt: skip
    args = parse_arguments(argv, "verify")
    assert args.source is not None and args.source.secret_id == "cdclake/source"
    assert (args.source.connection_name, args.source.database, args.source.engine) == ("db", "shop", "postgres")
    assert args.tables == ("s.a", "s.b") and (args.metrics.namespace, args.environment) == ("cdclake", "prod")
    # not the verify job's: left at their defaults
    assert (args.metrics.tables, args.full_load.reload, args.cdc.queue_url) == ("", False, None)
    with pytest.raises(ConfigError, match="The verify job needs --warehouse"):
        parse_arguments(["verify.py", *COMMON[:4]], "verify")


class _Spark:
    """Only what record_verify_run asks of a session before its MERGE: a frame of the rows."""

    def createDataFrame(self, rows: list[tuple[object, ...]], schema: str) -> list[tuple[object, ...]]:
        return rows


@pytest.mark.parametrize(("failures", "merges"), [(1, 2), (2, 3)])
def test_a_record_that_loses_a_commit_race_is_merged_again(
    monkeypatch: pytest.MonkeyPatch, failures: int, merges: int
) -> None:
    # GIVEN a MERGE that loses to another writer's commit (maintenance compacting the table) the first times
    from cdclake.lake.tables import TableMovedError
    from cdclake.verify import log as verify_log

    statements: list[str] = []

    def merge(spark: object, frame: object, statement: Callable[[str], str]) -> None:
        statements.append(statement("incoming"))
        if len(statements) <= failures:
            raise TableMovedError("another writer committed first")

    monkeypatch.setattr(verify_log, "ensure_table", lambda spark, table, frame: None)
    monkeypatch.setattr(verify_log, "merge_frame", merge)
    rows = verify_rows("jr_1", [_verified(TableComparison(table="s.t"))])
    # WHEN the run's rows are recorded THEN the MERGE is run again until it commits, keyed on run and table
    verify_log.record_verify_run(_Spark(), "silver", "cdclake_dev", rows)  # type: ignore[arg-type]
    assert len(statements) == merges
    assert "ON t.run_id = s.run_id AND t.source_table = s.source_table" in statements[-1]


def test_a_record_that_keeps_losing_or_fails_otherwise_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdclake.lake.tables import TableMovedError
    from cdclake.verify import log as verify_log

    attempts: list[int] = []

    def always_moved(spark: object, frame: object, statement: Callable[[str], str]) -> None:
        attempts.append(1)
        raise TableMovedError("another writer committed first")

    monkeypatch.setattr(verify_log, "ensure_table", lambda spark, table, frame: None)
    monkeypatch.setattr(verify_log, "merge_frame", always_moved)
    rows = verify_rows("jr_1", [_verified(TableComparison(table="s.t"))])
    with pytest.raises(TableMovedError):
        verify_log.record_verify_run(_Spark(), "silver", "cdclake_dev", rows)  # type: ignore[arg-type]
    assert len(attempts) == verify_log.RECORD_ATTEMPTS == 3

    def broken(spark: object, frame: object, statement: Callable[[str], str]) -> None:
        attempts.append(1)
        raise ValueError("not a conflict")

    attempts.clear()
    monkeypatch.setattr(verify_log, "merge_frame", broken)
    with pytest.raises(ValueError):
        verify_log.record_verify_run(_Spark(), "silver", "cdclake_dev", rows)  # type: ignore[arg-type]
    assert len(attempts) == 1  # anything else is not tried again


def test_a_source_verify_cannot_reach_or_read_skips_every_table_with_the_reason() -> None:
    # GIVEN the stack's secret naming a MySQL source nothing listens for, and a secret id that does not exist
    import socket

    import boto3
    from moto import mock_aws

    from cdclake.config import parse_config
    from cdclake.ops.source_catalog import SourceSettings
    from cdclake.verify.job import verify_tables

    config = parse_config(
        "bronze: {format: csv}\nsilver: {database: shop}\ntables:\n"
        "  s.a: {primary_key: [id], columns: {id: int}}\n  s.b: {primary_key: [id], columns: {id: int}}\n"
    )
    with socket.socket() as probe:  # a loopback port no server holds: the connection is refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name="eu-west-1")
        secret = {"engine": "mysql", "host": "127.0.0.1", "port": port, "username": "u", "password": "s3cret"}
        secrets.create_secret(Name="mysql", SecretString=json.dumps(secret))
        clients = (secrets, None)
        # WHEN each is verified (no engine is needed: nothing is compared)
        mysql = verify_tables(None, SourceSettings("mysql"), config.tables, clients, now=lambda: T0)  # type: ignore[arg-type]
        absent = verify_tables(None, SourceSettings("absent"), config.tables, clients, now=lambda: T0)  # type: ignore[arg-type]
    # THEN every table is skipped, each saying why (never the password), at the time given
    assert [v.comparison.table for v in mysql] == ["s.a", "s.b"]
    assert all(v.comparison.problem.startswith("could not be compared: ") for v in mysql), mysql[0].comparison
    assert all("s3cret" not in v.comparison.problem for v in mysql)
    assert all(v.started == v.finished == T0 and v.position is None for v in mysql)
    assert [v.comparison.table for v in absent] == ["s.a", "s.b"]
    assert all(v.comparison.problem.startswith("The secret absent cannot be read") for v in absent)
    assert [r.verdict for r in verify_rows("r", [*mysql, *absent])] == ["skipped"] * 4


def test_a_tables_log_line_keeps_the_first_keys_of_each_kind_and_counts_them_all() -> None:
    from cdclake.verify.log import log_record

    comparison = TableComparison(
        table="s.t", missing=[f"id={i}" for i in range(5)], different=["id=7", "id=8", "id=9"],
        differing_columns={"id=7": ["a"], "id=8": ["b"], "id=9": ["c"]},
    )  # fmt: skip
    record = log_record("jr_1", comparison, limit=2)
    assert (record["cdclake"], record["run_id"], record["table"], record["verdict"]) == (
        "verify_table", "jr_1", "s.t", "differing",
    )  # fmt: skip
    assert (record["missing"], record["missing_count"]) == (["id=0", "id=1"], 5)
    assert (record["different"], record["different_count"]) == ({"id=7": ["a"], "id=8": ["b"]}, 3)
    assert (record["unexpected"], record["unexpected_count"]) == ([], 0)
    json.dumps(record)  # one JSON line

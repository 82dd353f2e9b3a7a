"""AWS Glue job: compare silver with the source database, as ``cdclake verify`` does, and record the result.

Arguments: --config, --bronze, --warehouse, --secret_id (the stack's SourceSecretId; with --source_connection,
--dbname and --source_engine as the full-load job is given them); optional --catalog, --database, --tables s.a,s.b
(only those; empty: every configured table), --environment, --metrics_namespace, --wait_seconds (how long a
differing table may take to catch up with the live source: 0 reports the first read as it is) and
--delivery_seconds (the longest a committed change takes to reach bronze).

Each table is compared by key-range checksums (``verify.run``, the source's dialect); a differing one is read
again once silver has caught up with the source (the CDC loop runs beside this job), so lag is not reported as a
difference, and a table that does not catch up in time is lagging. The run MERGEs one row per table into
``cdclake_verify`` (keyed by Glue's job run id, so a retried run does not add rows) and publishes TablesDiffering,
RowsDiffering, TablesSkipped, TablesVerified and TablesLagging under --metrics_namespace. A differing table is a
finding, not a failure: the run succeeds and the stack's alarm on TablesDiffering alerts. A table that cannot be
compared (the source unreachable, no silver table yet) is skipped with its reason, counted in TablesSkipped.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from cdclake.errors import ConfigError
from cdclake.shells.glue_job import build_engine, job_run_id, parse_arguments
from cdclake.verify.job import verify_tables
from cdclake.verify.log import (
    VerifyRun,
    log_record,
    publish_verify_metrics,
    record_verify_run,
    summary_of,
    verify_rows,
)

log = logging.getLogger("cdclake")


def main(argv: Sequence[str]) -> VerifyRun:
    args = parse_arguments(argv, "verify")
    if args.source is None:
        raise ConfigError("The verify job needs --secret_id: the source secret (the stack's SourceSecretId).")
    run_id = job_run_id(argv)
    engine = build_engine(args)
    tables = [engine.config.table(t) for t in args.tables] or list(engine.config.tables)
    import boto3

    clients = (boto3.client("secretsmanager"), boto3.client("glue"))
    verified = verify_tables(engine, args.source, tables, clients, args.live if args.live.wait_seconds > 0 else None)
    rows = verify_rows(run_id, verified)
    record_verify_run(engine.spark, engine.catalog, engine.config.database, rows)
    for item in verified:
        log.info("%s", json.dumps(log_record(run_id, item.comparison), ensure_ascii=False, default=str))
    summary = summary_of(rows)
    log.info(
        "verify run_id=%s tables=%d differing=%d rows_differing=%d skipped=%d",
        run_id, len(rows), summary.tables_differing, summary.rows_differing, summary.tables_skipped,
    )  # fmt: skip
    if args.metrics.namespace is not None:
        now = datetime.now(UTC)
        publish_verify_metrics(boto3.client("cloudwatch"), args.metrics.namespace, summary, args.environment, now)
    return VerifyRun(run_id, rows, summary)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    main(sys.argv)

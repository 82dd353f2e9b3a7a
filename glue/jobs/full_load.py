"""AWS Glue job: the full load. Creates each silver table from its LOAD files, once.

Arguments: --config (table configuration), --bronze (DMS prefix), --warehouse; optional
--catalog, --reload true (replace tables that are already loaded) and --tables s.a,s.b (only those: the
state machine passes the tables the CDC lane left to this lane; a loaded table is loaded again only when
its load is due, ``select.load_due``). With --verify_job_name (the stack's VerifyAfterFullLoad), a run given
--tables starts the verify job for the tables it loaded, so a reload is proved against the source as the first
load is (the state machine starts the verify after the first load itself). With --secret_id (and
--source_connection, --dbname, --source_engine) the job first reads the source catalog: it writes
--config from it when nothing was uploaded there, else logs the configuration's drift.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from cdclake.engine.run import full_load
from cdclake.ops.source_catalog import prepare_job_configuration
from cdclake.report import RunReport
from cdclake.shells.glue_job import build_engine, log_report, parse_arguments, publish_metrics
from cdclake.verify.job import start_verify_after_reload

log = logging.getLogger("cdclake")


def main(argv: Sequence[str]) -> RunReport:
    args = parse_arguments(argv, "full_load")
    prepare_job_configuration(args.source, args.config, args.database)
    engine = build_engine(args)
    report = full_load(engine, [engine.config.table(t) for t in args.tables] or None, reload=args.full_load.reload)
    log_report(report)
    publish_metrics(args, engine.config, report)
    if args.full_load.verify_job_name and args.tables:
        _verify_reloaded(args.full_load.verify_job_name, report)
    report.checked()  # after the other tables' outcomes are logged and published
    return report


def _verify_reloaded(job_name: str, report: RunReport) -> None:
    """Start the verify job for the reloaded tables; a refused start is an error in the log, not a failed
    reload (failing would make the state machine load the tables again)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        start_verify_after_reload(boto3.client("glue"), job_name, report)
    except (BotoCoreError, ClientError) as error:
        log.error(
            "verify not started after the reload: %s; start it by hand: "
            "aws glue start-job-run --job-name %s --arguments '--tables=<the reloaded tables>'",
            error, job_name,
        )  # fmt: skip


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    main(sys.argv)

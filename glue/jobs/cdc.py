"""AWS Glue job: apply CDC files. Each table's changes land in one Iceberg commit per batch.

Arguments: --config, --bronze, --warehouse; optional --catalog, --environment and
--metrics_namespace (publish CloudWatch metrics), and one of:
- --queue_url (what the state machine starts): apply everything pending in bronze, then keep
  applying files as their S3 events arrive in that queue, in rounds at most --poll_seconds apart,
  until nothing new came for --idle_seconds or the run reached --max_run_seconds
  (``engine.follow``). An event is deleted as soon as its key is in the loop's index of bronze.
  With --alert_topic_arn, a table that keeps failing (once per failure episode) and files set aside
  in quarantine are published to that SNS topic; without it, logged at ERROR. With --reload_requests
  (an S3 URI, what the template gives) the job is the CDC lane: it never runs a (re)load, it writes
  the tables whose load is due to that object (``ops.reload_requests``) and holds their CDC, and
  the state machine runs the full-load job for them beside it.
- --manifest (a manual run): apply exactly the files it names; --replay true applies them again
  even if applied or quarantined (without a manifest: the quarantine).
- neither: apply every pending CDC file once.
The run fails when a table is still failing at its end (the state machine retries, then alerts).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import replace

from cdclake.alerts import Alerts, LoggedAlerts, SnsAlerts
from cdclake.context import Engine
from cdclake.dms.manifest import read_manifest
from cdclake.dms.store import read_text as read_stored_text
from cdclake.engine.follow import FollowReport, Round, follow
from cdclake.engine.run import apply_cdc_files, replay, run
from cdclake.engine.select import ReplaySelection, files_from_keys
from cdclake.errors import first_line
from cdclake.ops.reload_requests import ReloadRequest, ReloadRequester
from cdclake.report import RunReport
from cdclake.shells.glue_job import (
    JobArguments,
    build_engine,
    log_report,
    parse_arguments,
    publish_metrics,
    queue_notices,
    read_text,
    write_text,
)

log = logging.getLogger("cdclake")


def main(argv: Sequence[str]) -> RunReport | FollowReport:
    args = parse_arguments(argv, "cdc")
    engine = build_engine(args)
    if args.queue_url and not args.manifest and not args.replay:
        return _follow(args, engine)
    files = []
    if args.manifest:
        keys = [e.key for e in read_manifest(read_text(args.manifest), args.manifest)]
        files = files_from_keys(engine.store, keys, engine.config.bronze.transaction_path)
    if args.replay:
        report = replay(engine, ReplaySelection(keys=frozenset(f.key for f in files), quarantined=not files))
    elif args.manifest:
        report = apply_cdc_files(engine, files)
    else:
        report = run(engine, sweep=args.follow.sweep)
    log_report(report)
    publish_metrics(args, engine.config, report)
    report.checked()  # after the other tables' outcomes are logged and published
    return report


def _follow(args: JobArguments, engine: Engine) -> FollowReport:
    uri = args.reload_requests
    requester = None if uri is None else ReloadRequester(lambda text: write_text(uri, text), _requested(uri))

    def each_round(done: Round) -> None:
        log_report(done.report)
        if requester is not None and requester.offer(done.report.loads_pending):
            log.info("reload request written: %s", ", ".join(sorted(done.report.loads_pending)) or "none pending")
        log.info(
            "round %d: files=%d backlog_files=%d backlog_bytes=%d seconds=%.1f",
            done.number,
            sum(t.files_applied for t in done.report.tables),
            done.backlog.files,
            done.backlog.bytes,
            done.seconds,
        )
        publish_metrics(args, engine.config, done.report, done.backlog)

    settings = args.follow if requester is None else replace(args.follow, loads=False)
    outcome = follow(engine, settings, queue_notices(args), on_round=each_round, alerts=job_alerts(args))
    log.info(
        "follow ended: %s after %d rounds; files=%d bytes=%d listings=%d",
        outcome.stopped_by,
        outcome.rounds,
        outcome.files_applied,
        outcome.bytes_applied,
        outcome.listings,
    )
    RunReport(failures=list(outcome.failures.values())).checked()  # a table still failing fails the run
    return outcome


def _requested(uri: str) -> frozenset[str] | None:
    """The tables the reload request at ``uri`` holds now (None: none written, or unreadable): an unchanged
    request is not written again, so the full-load lane counts its attempts from when it was first made."""
    text = read_stored_text(uri)  # None: none written yet
    if text is None:
        log.info("no reload request at %s: the first round writes one", uri)
        return None
    try:
        return frozenset(ReloadRequest.from_json(text).tables)
    except Exception as error:  # unreadable: written anew
        log.warning("the reload request at %s is unreadable (%s): it is written anew", uri, first_line(error))
        return None


def job_alerts(args: JobArguments) -> Alerts:
    """The stack's alert topic when the job is given one, else log lines at ERROR."""
    if not args.alert_topic_arn:
        return LoggedAlerts()
    import boto3

    return SnsAlerts(boto3.client("sns"), args.alert_topic_arn, args.environment)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    main(sys.argv)

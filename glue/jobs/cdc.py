"""AWS Glue job: apply CDC files. Each table's changes land in one Iceberg commit per batch.

Arguments: --config, --bronze, --warehouse; optional --catalog, --environment and
--metrics_namespace (publish CloudWatch metrics), and one of:
- --queue_url (what the state machine starts): apply everything pending in bronze, then keep
  applying files as their S3 events arrive in that queue, in rounds at most --poll_seconds apart,
  until nothing new came for --idle_seconds or the run reached --max_run_seconds
  (``engine.follow``). An event is deleted as soon as its key is in the loop's index of bronze.
  With --alert_topic_arn, a table that keeps failing (once per failure episode, and once when it
  recovers), a table gone silent (once per silence: no file for longer than its cadence while the
  others write, or, with --replication_task_arns, a DMS table error; ``engine.silence``, recorded at
  --silent_tables) and files set aside in quarantine are published to that SNS topic; without it,
  logged at ERROR. With --failure_episodes (an S3 URI) the episodes span runs
  (``ops.failure_episodes``): a table failing run after run is alerted once. A table still failing
  at the end is held, not a failed run: the other tables' commits stand, its files stay pending (or
  quarantined), and the run succeeds, so the state machine neither retries an hour-long run for one
  table nor waits with its sweep; only a run in which every table failed fails (a fault of the run,
  not of a table). With --reload_requests
  (an S3 URI, what the template gives) the job is the CDC lane: it never runs a (re)load, it writes
  the tables whose load is due to that object (``ops.reload_requests``) and holds their CDC, and
  the state machine runs the full-load job for them beside it; a round that adds a table to the request
  ends the run (``reload_asked``), so the state machine starts that reload at once.
- --manifest (a manual run): apply exactly the files it names; --replay true applies them again
  even if applied or quarantined (without a manifest: the quarantine).
- neither: apply every pending CDC file once.
Without --queue_url the run fails when a table is still failing at its end (the state machine retries,
then alerts).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from cdclake.alerts import Alerts, FailureEpisodes, LoggedAlerts, MemoryEpisodes, SnsAlerts
from cdclake.context import Engine
from cdclake.dms.manifest import read_manifest
from cdclake.dms.notices import Notices
from cdclake.dms.store import read_text as read_stored_text
from cdclake.engine.follow import ApplyPending, follow
from cdclake.engine.run import apply_cdc_files, replay, run
from cdclake.engine.select import ReplaySelection, files_from_keys, skip_reason
from cdclake.engine.silence import DmsTableStates, SilenceEdges
from cdclake.errors import first_line
from cdclake.ops.reload_requests import ReloadRequest, ReloadRequester
from cdclake.report import FollowReport, Round, RunReport
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
    if args.cdc.queue_url and not args.cdc.manifest and not args.cdc.replay:
        return _follow(args, engine)
    files = []
    if args.cdc.manifest:
        keys = [e.key for e in read_manifest(read_text(args.cdc.manifest), args.cdc.manifest)]
        files = files_from_keys(engine.store, keys, engine.config.bronze.transaction_path)
    if args.cdc.replay:
        report = replay(engine, ReplaySelection(keys=frozenset(f.key for f in files), quarantined=not files))
    elif args.cdc.manifest:
        report = apply_cdc_files(engine, files)
    else:
        report = run(engine, sweep=args.cdc.follow.sweep)
    log_report(report)
    publish_metrics(args, engine.config, report)
    report.checked()  # after the other tables' outcomes are logged and published
    return report


def _follow(
    args: JobArguments, engine: Engine, notices: Notices | None = None, apply: ApplyPending | None = None
) -> FollowReport:
    """The CDC lane: follow the queue (``notices``: the job's queue unless given; ``apply``: a round's work,
    ``run.apply_pending`` unless given: the seams tests use)."""
    uri = args.cdc.reload_requests
    requester = None if uri is None else ReloadRequester(lambda text: write_text(uri, text), _requested(uri))
    asked: set[str] = set()  # tables this run added to the reload request

    def each_round(done: Round) -> None:
        log_report(done.report)
        before = set() if requester is None or requester.last is None else set(requester.last)
        if requester is not None and requester.offer(done.report.loads_pending):
            log.info("reload request written: %s", ", ".join(sorted(done.report.loads_pending)) or "none pending")
            asked.update(done.report.loads_pending.keys() - before)
        log.info(
            "round %d: files=%d backlog_files=%d backlog_bytes=%d seconds=%.1f",
            done.number,
            sum(t.files_applied for t in done.report.tables),
            done.backlog.files,
            done.backlog.bytes,
            done.seconds,
        )
        publish_metrics(args, engine.config, done.report, done.backlog)

    settings = args.cdc.follow if requester is None else replace(args.cdc.follow, loads=False)
    outcome = follow(
        engine,
        settings,
        notices or queue_notices(args),
        on_round=each_round,
        alerts=job_alerts(args),
        episodes=job_episodes(args),
        until=lambda done: reload_asked(asked, done),
        apply=apply,
        silence=silence_edges(args),
    )
    log.info(
        "follow ended: %s after %d rounds; files=%d bytes=%d listings=%d",
        outcome.stopped_by,
        outcome.rounds,
        outcome.files_applied,
        outcome.bytes_applied,
        outcome.listings,
    )
    return held_tables(outcome, [t.source for t in engine.config.tables if skip_reason(t) is None])


def reload_asked(asked: set[str], done: Round) -> str:
    """Why the run ends after the round ``done`` ("" to go on): it asked for a reload of tables not asked
    for before. The state machine starts the full-load job for them only between CDC runs (its work check),
    so the run ends and the reload starts within a minute, not after the rest of a run of up to
    CdcMaxRunSeconds; the tables' CDC is held meanwhile (their load is due: the CDC lane gives them no
    state), and the next run follows every other table again. Not while another table still has files to
    apply (a batch bound): their events were deleted once indexed, so the run applies them first."""
    if not asked or done.waiting - asked - done.report.loads_pending.keys():
        return ""
    return f"reload requested ({', '.join(sorted(asked))})"


def held_tables(outcome: FollowReport, tables: Sequence[str]) -> FollowReport:
    """The CDC lane's verdict on the tables still failing at the end of a follow: each is held (logged; its
    files stay pending, its episode alerted) and the run succeeds, unless every one of ``tables`` failed:
    then the run fails with their errors (nothing of the run worked: a fault of the run, which the state
    machine retries and alerts)."""
    failures = list(outcome.failures.values())
    if failures and {f.table for f in failures} >= set(tables):
        RunReport(failures=failures).checked()
    for failure in failures:
        log.warning(
            "held: %s (its %s failed: %s); its files stay pending, the other tables were applied",
            failure.table,
            failure.kind,
            first_line(failure.error),
        )
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


def job_episodes(args: JobArguments) -> FailureEpisodes:
    """The failure episodes in --failure_episodes when the job is given it, else this run's own."""
    if not args.cdc.failure_episodes:
        return MemoryEpisodes()
    import boto3

    from cdclake.ops.failure_episodes import S3Episodes

    return S3Episodes(boto3.client("s3"), args.cdc.failure_episodes)


def silence_edges(args: JobArguments) -> SilenceEdges:
    """The silence watch's edges (``engine.silence``): the DMS tasks' table states (with
    --replication_task_arns) and the tables earlier runs alerted, recorded at --silent_tables."""
    uri = args.cdc.silent_tables
    alerted: frozenset[str] = frozenset()
    if uri is not None:
        try:
            alerted = frozenset(json.loads(read_stored_text(uri) or "[]"))
        except Exception as error:  # unreadable: silences may be alerted again, nothing is lost
            log.warning("the silent tables at %s are not read (%s): they may be alerted again", uri, first_line(error))

    def remember(tables: frozenset[str]) -> None:
        if uri is not None:
            write_text(uri, json.dumps(sorted(tables)))

    return SilenceEdges(dms_table_states(args.cdc.replication_task_arns), alerted, remember)


def dms_table_states(task_arns: Sequence[str], dms: Any = None) -> DmsTableStates | None:
    """Each table's DMS state ("schema.table" -> TableState) across the tasks, read when the silence watch
    looks; None without tasks. ``dms``: the client (made here if not given)."""
    if not task_arns:
        return None
    if dms is None:
        import boto3

        dms = boto3.client("dms")

    def read() -> dict[str, str]:
        states: dict[str, str] = {}
        for arn in task_arns:
            for page in dms.get_paginator("describe_table_statistics").paginate(ReplicationTaskArn=arn):
                for table in page.get("TableStatistics", []):
                    states[f"{table['SchemaName']}.{table['TableName']}"] = str(table.get("TableState", ""))
        return states

    return read


def job_alerts(args: JobArguments) -> Alerts:
    """The stack's alert topic when the job is given one, else log lines at ERROR."""
    if not args.cdc.alert_topic_arn:
        return LoggedAlerts()
    import boto3

    return SnsAlerts(boto3.client("sns"), args.cdc.alert_topic_arn, args.environment)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    main(sys.argv)

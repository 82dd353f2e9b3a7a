"""What the AWS Glue job entry points share: argument parsing and building the engine.

``awsglue`` is imported only when it exists (inside AWS Glue); elsewhere the same arguments are
parsed with argparse, so the job scripts also run under plain PySpark against a local warehouse.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from cdclake.config import DEFAULT_CATALOG, PipelineConfig, load_config, parse_config
from cdclake.context import Engine, open_engine
from cdclake.dms.notices import QueueNotices
from cdclake.engine.follow import FollowSettings
from cdclake.errors import ConfigError
from cdclake.ops.maintenance import MaintenanceSettings
from cdclake.ops.source_catalog import SourceSettings
from cdclake.report import Backlog, RunReport
from cdclake.runtime.session import GlueCatalog, LocalCatalog
from cdclake.verify.live import LiveSettings

log = logging.getLogger("cdclake")

REQUIRED_ARGUMENTS = ("config", "bronze", "warehouse")
_SHARED = (*REQUIRED_ARGUMENTS, "catalog", "database")
_METRICS = ("environment", "metrics_namespace", "table_metrics")
_SOURCE = ("secret_id", "source_connection", "dbname", "source_engine")
# The maintenance job's whole-number settings (it always skips tables unchanged since their last maintenance).
_MAINTENANCE = tuple(f.name for f in fields(MaintenanceSettings) if f.type in (int, "int"))
# The CDC lane's state in S3: its reload request and the tables in a failure episode.
_CDC_LANE = ("reload_requests", "failure_episodes")
# --sweep true: the full reconciliation (all of bronze listed, every ledger read whole), given by hand to a run
_FOLLOW = ("queue_url", "poll_seconds", "idle_seconds", "max_run_seconds", "relist_seconds", "sweep")

# The CDC job's pace when the template gives none (its parameters CdcPollSeconds, CdcIdleSeconds, CdcMaxRunSeconds,
# CdcRelistSeconds).
JOB_FOLLOW = FollowSettings(poll_seconds=10.0, idle_seconds=300.0, max_run_seconds=3600.0, relist_seconds=900.0)

DEFAULT_MAINTENANCE = MaintenanceSettings(changed_only=True)

# The verify job's patience with a live source when the template gives none (VerifyWaitSeconds,
# VerifyDeliverySeconds): DMS's CdcMaxBatchInterval (60 s) plus the CDC job's poll (30 s) and the writing.
JOB_LIVE = LiveSettings(wait_seconds=900.0, delivery_seconds=120.0, poll_seconds=15.0)

_SILENCE = ("replication_task_arns", "silent_tables")  # the CDC job's silence watch (engine.silence)

JobName = Literal["full_load", "cdc", "maintain", "gold", "verify"]

# The arguments each job reads, and no other: the template gives each job exactly these
# (tests/aws/test_template.py), so an argument that reaches a job is one it uses.
JOB_ARGUMENTS: dict[JobName, tuple[str, ...]] = {
    "full_load": (*_SHARED, "reload", "tables", *_METRICS, *_SOURCE, "verify_job_name"),
    "cdc": (
        *_SHARED,
        "manifest",
        "replay",
        *_METRICS,
        *_FOLLOW,
        "alert_topic_arn",
        "reload_requests",
        "failure_episodes",
        *_SILENCE,
    ),
    "maintain": (*_SHARED, *_MAINTENANCE, "gold_database"),  # the marts are maintained where the gold job keeps them
    "gold": (*_SHARED, "gold_database"),
    # Compares silver with the source (through the full-load job's secret and connection), publishes its
    # pipeline metrics and records each table's result in cdclake_verify; no per-table metrics.
    "verify": (*_SHARED, "tables", "environment", "metrics_namespace", *_SOURCE, "wait_seconds", "delivery_seconds"),
}


@dataclass(frozen=True)
class JobMetrics:
    """Where a job's CloudWatch metrics go; none without a namespace."""

    namespace: str | None = None  # publish CloudWatch metrics under this namespace when set
    tables: str = ""  # comma-separated tables that get CloudWatch metrics of their own (others: log lines)


@dataclass(frozen=True)
class CdcArguments:
    """What the CDC job alone reads: what it applies, the queue it follows, and its lane's state in S3."""

    manifest: str | None = None  # the batch manifest; absent = everything pending
    replay: bool = False  # apply the manifest's files (or, without one, the quarantine) again
    # follow the file queue (S3 events) and apply files as they arrive (engine.follow)
    queue_url: str | None = None
    follow: FollowSettings = JOB_FOLLOW
    # where the loop writes the (re)loads it leaves to the full-load lane (ops.reload_requests); None: it
    # writes none (a manual run)
    reload_requests: str | None = None
    # the SNS topic its alerts go to (one per failure episode); None: no alert is published
    alert_topic_arn: str | None = None
    # the S3 object (s3://bucket/key) where the tables in a failure episode are kept from run to run
    # (ops.failure_episodes); None: each run keeps its own, and alerts a table still failing again
    failure_episodes: str | None = None
    # the DMS tasks whose table statistics tell a table DMS stopped capturing (engine.silence)
    replication_task_arns: tuple[str, ...] = ()
    # where the tables alerted as silent are recorded (a JSON list), so a next run does not alert them again
    silent_tables: str | None = None


@dataclass(frozen=True)
class FullLoadArguments:
    """What the full-load job alone reads."""

    reload: bool = False  # replace tables that are already loaded
    # the verify job it starts for the tables a run given --tables (a reload) loaded; None: none
    verify_job_name: str | None = None


@dataclass(frozen=True)
class JobArguments:
    """A Glue job's arguments, parsed once when it starts, grouped as the jobs read them; what a job
    does not read keeps its default."""

    config: str  # s3:// URI or local path of the table configuration
    bronze: str  # s3://bucket/prefix DMS writes to (or a local directory)
    warehouse: str  # s3:// warehouse (Glue Data Catalog) or a local directory (Hadoop catalog)
    catalog: str = DEFAULT_CATALOG
    database: str | None = None  # the stack's Glue database; replaces the configuration's silver.database
    gold_database: str | None = None  # the stack's gold Glue database; replaces the configuration's gold.database
    environment: str = "dev"  # the stack's environment: its metrics' dimension, its alerts' subject
    # Full-load and verify jobs: only these tables (source names; the state machine passes the CDC lane's reload
    # request); empty: every configured table. Either way a loaded table is left alone unless its load is due.
    tables: tuple[str, ...] = ()
    # Full-load and verify jobs: the source (its catalog writes or checks the configuration; verify reads it);
    # None without a secret.
    source: SourceSettings | None = None
    metrics: JobMetrics = JobMetrics()
    cdc: CdcArguments = CdcArguments()
    full_load: FullLoadArguments = FullLoadArguments()
    maintenance: MaintenanceSettings = DEFAULT_MAINTENANCE  # maintenance job
    # Verify job: how long differing tables may take to catch up with a live source (verify.live)
    live: LiveSettings = JOB_LIVE


def parse_arguments(argv: Sequence[str], job: JobName) -> JobArguments:
    """Glue passes ``--name value`` pairs (among its own: ``--JOB_ID`` and the like, ignored here);
    ``getResolvedOptions`` reads them inside AWS Glue, argparse the same way elsewhere. Only the
    arguments ``job`` reads are looked at."""
    names = JOB_ARGUMENTS[job]
    values = {name: value for name, value in _given(argv, names).items() if value}
    for name in REQUIRED_ARGUMENTS:
        if name not in values:
            raise ConfigError(f"The {job} job needs --{name}.")
    return JobArguments(
        config=values["config"],
        bronze=values["bronze"],
        warehouse=values["warehouse"],
        catalog=values.get("catalog", DEFAULT_CATALOG),
        database=values.get("database"),
        gold_database=values.get("gold_database"),
        environment=values.get("environment", "dev"),
        tables=_listed(values, "tables"),
        source=_source(values),
        metrics=JobMetrics(values.get("metrics_namespace"), values.get("table_metrics", "")),
        cdc=CdcArguments(
            manifest=values.get("manifest"),
            replay=_flag(values, "replay"),
            queue_url=values.get("queue_url"),
            follow=FollowSettings(
                poll_seconds=_seconds(values, "poll_seconds", JOB_FOLLOW.poll_seconds) or 0.0,
                idle_seconds=_seconds(values, "idle_seconds", JOB_FOLLOW.idle_seconds),
                max_run_seconds=_seconds(values, "max_run_seconds", JOB_FOLLOW.max_run_seconds),
                relist_seconds=_relist_seconds(values),
                sweep=_flag(values, "sweep"),
            ),
            reload_requests=values.get("reload_requests"),
            alert_topic_arn=values.get("alert_topic_arn"),
            failure_episodes=values.get("failure_episodes"),
            replication_task_arns=_listed(values, "replication_task_arns"),
            silent_tables=values.get("silent_tables"),
        ),
        full_load=FullLoadArguments(reload=_flag(values, "reload"), verify_job_name=values.get("verify_job_name")),
        maintenance=_maintenance(values),
        live=LiveSettings(
            wait_seconds=_seconds(values, "wait_seconds", JOB_LIVE.wait_seconds) or 0.0,
            delivery_seconds=_seconds(values, "delivery_seconds", JOB_LIVE.delivery_seconds) or 0.0,
            poll_seconds=JOB_LIVE.poll_seconds,
        ),
    )


def _listed(values: dict[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated argument's items (none when it is absent)."""
    return tuple(item.strip() for item in values.get(name, "").split(",") if item.strip())


def job_run_id(argv: Sequence[str]) -> str:
    """The run's id: Glue's ``--JOB_RUN_ID`` (without the ``_attempt_N`` Glue adds to a retry of the same run, so
    a retried run writes the same rows again), or a new one outside Glue."""
    given = list(argv)
    if "--JOB_RUN_ID" in given[:-1]:
        run_id = given[given.index("--JOB_RUN_ID") + 1]
        return re.sub(r"_attempt_\d+$", "", run_id)
    return f"local_{uuid.uuid4().hex}"


def _maintenance(values: dict[str, str]) -> MaintenanceSettings:
    """The maintenance job's settings: its defaults, with the whole numbers it was given."""
    given: dict[str, Any] = {name: _whole(values, name) for name in _MAINTENANCE if name in values}
    return replace(DEFAULT_MAINTENANCE, **given)


def _given(argv: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    present = [name for name in names if f"--{name}" in argv]
    try:
        from awsglue.utils import getResolvedOptions
    except ImportError:
        parser = argparse.ArgumentParser(add_help=False)
        for name in present:
            parser.add_argument(f"--{name}")
        return {k: v for k, v in vars(parser.parse_known_args(list(argv[1:]))[0]).items() if v is not None}
    return dict(getResolvedOptions(list(argv), present)) if present else {}


def _flag(values: dict[str, str], name: str) -> bool:
    return values.get(name, "false").lower() == "true"


def _seconds(values: dict[str, str], name: str, default: float | None) -> float | None:
    text = values.get(name)
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        raise ConfigError(f"--{name} must be a number of seconds, not '{text}'.") from None
    if seconds < 0:
        raise ConfigError(f"--{name} must not be negative, not '{text}'.")
    return seconds


def _relist_seconds(values: dict[str, str]) -> float:
    """--relist_seconds: a full listing of bronze this often; positive, and shorter than --max_run_seconds when
    both are given (else a file whose event was lost waits for the next run's first listing)."""
    relist = _seconds(values, "relist_seconds", JOB_FOLLOW.relist_seconds) or 0.0
    if relist <= 0:
        raise ConfigError(f"--relist_seconds must be positive, not '{values.get('relist_seconds')}'.")
    longest = _seconds(values, "max_run_seconds", None)
    if "relist_seconds" in values and longest is not None and relist >= longest:
        raise ConfigError(
            f"--relist_seconds ({values['relist_seconds']}) must be shorter than --max_run_seconds "
            f"({values['max_run_seconds']}): a run would end before it lists all of bronze again."
        )
    return relist


def _whole(values: dict[str, str], name: str) -> int:
    text = values[name]
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"--{name} must be a positive whole number, not {text!r}.")
    return value


def _source(values: dict[str, str]) -> SourceSettings | None:
    if "secret_id" not in values:
        return None
    return SourceSettings(
        secret_id=values["secret_id"],
        connection_name=values.get("source_connection"),
        database=values.get("dbname"),
        engine=values.get("source_engine"),
    )


def write_text(uri: str, text: str, content_type: str = "application/json") -> None:
    """Write a small text object (a reload request) to S3 or a local path."""
    if uri.startswith("s3://"):
        import boto3

        bucket, _, key = uri[len("s3://") :].partition("/")
        boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"), ContentType=content_type)
        return
    Path(uri).parent.mkdir(parents=True, exist_ok=True)
    Path(uri).write_text(text, encoding="utf-8")


def read_text(uri: str) -> str:
    """Read a small text object (configuration, manifest) from S3 or a local path; missing is an error."""
    from cdclake.dms.store import read_text as read_stored_text

    try:
        text = read_stored_text(uri)
    except OSError as exc:
        raise ConfigError(f"{uri} cannot be read: {exc.strerror}.") from None
    if text is None:
        raise ConfigError(f"{uri} does not exist.")
    return text


def job_config(args: JobArguments) -> PipelineConfig:
    config = (
        parse_config(read_text(args.config), args.config)
        if args.config.startswith("s3://")
        else load_config(Path(args.config))
    )
    config = replace(config, bronze=replace(config.bronze, path=args.bronze))
    if args.database:
        # The marts name silver tables as the configuration does: they read the stack's database.
        config = config.in_database(args.database)
    if args.gold_database:
        if args.gold_database == config.database:
            raise ConfigError(f"--gold_database must differ from the silver database ({config.database}).")
        config = replace(config, gold=replace(config.gold, database=args.gold_database))
    return config


def build_engine(args: JobArguments) -> Engine:
    """The engine for a job run: Glue Data Catalog on S3, or a local Hadoop catalog."""
    config = job_config(args)
    if args.warehouse.startswith("s3://"):
        catalog: GlueCatalog | LocalCatalog = GlueCatalog(warehouse=args.warehouse)
        staging = None
    else:
        warehouse = Path(args.warehouse)
        # a job run on a laptop or in the tests: the driver JVM's extra options as the CLI takes them
        jvm_options = os.environ.get("CDCLAKE_JVM_OPTIONS", "")
        catalog = LocalCatalog(warehouse=warehouse, cache_dir=warehouse.parent / "cache", jvm_options=jvm_options)
        staging = warehouse.parent / "staging"
    return open_engine(config, catalog, args.catalog, staging)


def queue_notices(args: JobArguments) -> QueueNotices:
    """The file queue as the follow loop reads it; bronze must be on S3 (the events name its keys)."""
    import boto3

    if not args.cdc.queue_url:
        raise ConfigError("--queue_url is not set.")
    if not args.bronze.startswith("s3://"):
        raise ConfigError(f"--queue_url needs bronze on S3 (its events name S3 keys), not {args.bronze}.")
    bucket, _, prefix = args.bronze[len("s3://") :].partition("/")
    return QueueNotices(boto3.client("sqs"), args.cdc.queue_url, bucket, prefix.strip("/"))


def publish_metrics(
    args: JobArguments, config: PipelineConfig, report: RunReport, backlog: Backlog | None = None
) -> None:
    """Send the run's (or round's) pipeline metrics to CloudWatch and log a JSON line per table
    batch, when the job was given a namespace; tables in --table_metrics get metrics of their own."""
    if args.metrics.namespace is None:
        return
    import boto3

    from cdclake.ops.metrics import MetricsTarget, publish, table_metrics_for

    target = MetricsTarget(
        args.metrics.namespace, args.environment, table_metrics_for(args.metrics.tables.split(","), config)
    )
    sent = publish(boto3.client("cloudwatch"), target, report, backlog)
    log.info(
        "metrics published namespace=%s entries=%d table_lines=%d", args.metrics.namespace, sent.entries, sent.lines
    )


def log_report(report: RunReport) -> None:
    for table in report.tables:
        log.info("%s", table.summary())
    for failure in report.failures:
        log.error("%s", failure.summary())

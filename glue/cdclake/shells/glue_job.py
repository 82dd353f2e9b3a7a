"""What the AWS Glue job entry points share: argument parsing and building the engine.

``awsglue`` is imported only when it exists (inside AWS Glue); elsewhere the same arguments are
parsed with argparse, so the job scripts also run under plain PySpark against a local warehouse.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cdclake.config import DEFAULT_CATALOG, PipelineConfig, load_config, parse_config
from cdclake.context import Engine, open_engine
from cdclake.dms.notices import QueueNotices
from cdclake.errors import ConfigError
from cdclake.report import Backlog, RunReport
from cdclake.runtime.session import GlueCatalog, LocalCatalog

log = logging.getLogger("cdclake")

COMMON_ARGUMENTS = ("config", "bronze", "warehouse")
OPTIONAL_ARGUMENTS = (
    "catalog",
    "manifest",
    "reload",
    "replay",
    "environment",
    "metrics_namespace",
    "database",
    "gold_database",
    "queue_url",
    "poll_seconds",
    "idle_seconds",
    "max_run_seconds",
    "table_metrics",
)


@dataclass(frozen=True)
class JobArguments:
    config: str  # s3:// URI or local path of the table configuration
    bronze: str  # s3://bucket/prefix DMS writes to (or a local directory)
    warehouse: str  # s3:// warehouse (Glue Data Catalog) or a local directory (Hadoop catalog)
    catalog: str = DEFAULT_CATALOG
    manifest: str | None = None  # CDC job: the batch manifest; absent = everything pending
    reload: bool = False  # full-load job: replace tables that are already loaded
    replay: bool = False  # CDC job: apply the manifest's files (or, without one, the quarantine) again
    environment: str = "dev"
    metrics_namespace: str | None = None  # publish CloudWatch metrics under this namespace when set
    database: str | None = None  # the stack's Glue database; replaces the configuration's silver.database
    gold_database: str | None = None  # the stack's gold Glue database; replaces the configuration's gold.database
    # CDC job: follow the file queue (S3 events) and apply files as they arrive, in rounds at most
    # poll_seconds apart, until idle for idle_seconds or running for max_run_seconds.
    queue_url: str | None = None
    poll_seconds: float = 30.0
    idle_seconds: float = 300.0
    max_run_seconds: float = 3600.0
    table_metrics: str = ""  # comma-separated tables that get CloudWatch metrics of their own (others: log lines)


def parse_arguments(argv: Sequence[str], extra: Sequence[str] = ()) -> JobArguments:
    """Glue passes ``--name value`` pairs; ``getResolvedOptions`` reads them when available."""
    names = [*COMMON_ARGUMENTS, *extra]
    try:
        from awsglue.utils import getResolvedOptions

        optional = [n for n in OPTIONAL_ARGUMENTS if f"--{n}" in argv]
        values = getResolvedOptions(list(argv), [*names, *optional])
    except ImportError:
        parser = argparse.ArgumentParser(description="cdclake Glue job (running outside AWS Glue)")
        for name in names:
            parser.add_argument(f"--{name}", required=True)
        for name in OPTIONAL_ARGUMENTS:
            if name not in names:
                parser.add_argument(f"--{name}")
        values = {k: v for k, v in vars(parser.parse_known_args(list(argv[1:]))[0]).items() if v is not None}
    return JobArguments(
        config=values["config"],
        bronze=values["bronze"],
        warehouse=values["warehouse"],
        catalog=values.get("catalog") or DEFAULT_CATALOG,
        manifest=values.get("manifest") or None,
        reload=str(values.get("reload", "false")).lower() == "true",
        replay=str(values.get("replay", "false")).lower() == "true",
        environment=values.get("environment") or "dev",
        metrics_namespace=values.get("metrics_namespace") or None,
        database=values.get("database") or None,
        gold_database=values.get("gold_database") or None,
        queue_url=values.get("queue_url") or None,
        poll_seconds=_seconds(values, "poll_seconds", JobArguments.poll_seconds),
        idle_seconds=_seconds(values, "idle_seconds", JobArguments.idle_seconds),
        max_run_seconds=_seconds(values, "max_run_seconds", JobArguments.max_run_seconds),
        table_metrics=values.get("table_metrics") or "",
    )


def _seconds(values: dict[str, str], name: str, default: float) -> float:
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


def read_text(uri: str) -> str:
    """Read a small text object (configuration, manifest) from S3 or a local path."""
    if uri.startswith("s3://"):
        import boto3

        bucket, _, key = uri[len("s3://") :].partition("/")
        body = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
        return str(body.decode("utf-8"))
    try:
        return Path(uri).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{uri} cannot be read: {exc.strerror}.") from None


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
        catalog = LocalCatalog(warehouse=warehouse, cache_dir=warehouse.parent / "cache")
        staging = warehouse.parent / "staging"
    return open_engine(config, catalog, args.catalog, staging)


def queue_notices(args: JobArguments) -> QueueNotices:
    """The file queue as the follow loop reads it; bronze must be on S3 (the events name its keys)."""
    import boto3

    if not args.queue_url:
        raise ConfigError("--queue_url is not set.")
    if not args.bronze.startswith("s3://"):
        raise ConfigError(f"--queue_url needs bronze on S3 (its events name S3 keys), not {args.bronze}.")
    bucket, _, prefix = args.bronze[len("s3://") :].partition("/")
    return QueueNotices(boto3.client("sqs"), args.queue_url, bucket, prefix.strip("/"))


def publish_metrics(
    args: JobArguments, config: PipelineConfig, report: RunReport, backlog: Backlog | None = None
) -> None:
    """Send the run's (or round's) pipeline metrics to CloudWatch and log a JSON line per table
    batch, when the job was given a namespace; tables in --table_metrics get metrics of their own."""
    if args.metrics_namespace is None:
        return
    import boto3

    from cdclake.ops.metrics import MetricsTarget, publish, table_metrics_for

    target = MetricsTarget(
        args.metrics_namespace, args.environment, table_metrics_for(args.table_metrics.split(","), config)
    )
    sent = publish(boto3.client("cloudwatch"), target, report, backlog)
    log.info(
        "metrics published namespace=%s entries=%d table_lines=%d", args.metrics_namespace, sent.entries, sent.lines
    )


def log_report(report: RunReport) -> None:
    for table in report.tables:
        log.info("%s", table.summary())
    for failure in report.failures:
        log.error("%s", failure.summary())

"""The full-load job's side of ``cdclake init``: read the source catalog through the stack's Glue
connection with the credentials of its Secrets Manager secret, then write the table configuration
the jobs use when none was uploaded, or report its drift from the catalog when one was.

The AWS clients and the catalog reader are passed in (moto in the tests, boto3 in the job).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cdclake.config import parse_config
from cdclake.dms.store import read_text
from cdclake.ops.drift import Drift, drift
from cdclake.sources.catalog.connect import SourceAddress, address_from_secret, read_catalog
from cdclake.sources.catalog.model import CatalogTable, SourceCatalogError
from cdclake.sources.catalog.plan import BronzeDefaults, configuration_text

log = logging.getLogger("cdclake.source")


@dataclass(frozen=True)
class SourceSettings:
    """The stack's SourceSecretId, SourceConnectionName, SourceDatabaseName and SourceEngine (the
    full-load job's --secret_id, --source_connection, --dbname and --source_engine)."""

    secret_id: str
    connection_name: str | None = None
    database: str | None = None
    engine: str | None = None


@dataclass(frozen=True)
class ConfigurationSync:
    outcome: Literal["written", "in step", "drift"]
    tables: int  # tables in the catalog the configuration covers (or would)
    drift: list[Drift] = field(default_factory=list)


def source_address(settings: SourceSettings, secrets: Any, glue: Any | None) -> SourceAddress:
    """Credentials from the secret; host, port and database from the Glue connection's JDBC URL
    when there is one (it is the address the job's network reaches), else from the secret."""
    try:
        value = secrets.get_secret_value(SecretId=settings.secret_id)["SecretString"]
        secret = json.loads(value)
    except (KeyError, ValueError):
        raise SourceCatalogError(f"The secret {settings.secret_id} does not hold a JSON database secret.") from None
    except Exception as exc:  # botocore's ClientError: missing secret, no permission
        raise SourceCatalogError(f"The secret {settings.secret_id} cannot be read: {exc}.") from None
    jdbc_url = None
    if settings.connection_name and glue is not None:
        try:
            connection = glue.get_connection(Name=settings.connection_name, HidePassword=True)["Connection"]
        except Exception as exc:
            raise SourceCatalogError(f"The Glue connection {settings.connection_name} cannot be read: {exc}.") from None
        jdbc_url = connection.get("ConnectionProperties", {}).get("JDBC_CONNECTION_URL")
    return address_from_secret(secret, engine=settings.engine, database=settings.database, jdbc_url=jdbc_url)


def sync_configuration(
    config_uri: str,
    address: SourceAddress,
    silver_database: str | None,
    s3: Any | None,
    read: Callable[[SourceAddress], list[CatalogTable]] = read_catalog,
) -> ConfigurationSync:
    """Write the configuration at ``config_uri`` (``s3://`` or a local path) from the catalog when
    nothing is there; otherwise leave it alone and return its drift from the catalog (tables the
    configuration leaves out on purpose show as new)."""
    from cdclake.ops.init import default_database, selected_tables

    existing = _read_text(config_uri, s3)
    catalog = read(address)
    chosen = selected_tables(address, catalog).tables
    if existing is None:
        for table in chosen:
            if not table.key:
                log.warning("source table %s has no primary key: configured append_only: true", table.qualified)
        database = silver_database or default_database(address)
        text = configuration_text(address.engine, chosen, BronzeDefaults(), database)
        parse_config(text, config_uri)
        _write_text(config_uri, text, s3)
        log.info("configuration written from the source catalog uri=%s tables=%d", config_uri, len(chosen))
        return ConfigurationSync("written", len(chosen))
    found = drift(parse_config(existing, config_uri), chosen, catalog)
    for item in found:
        log.warning("source drift: %s", item.line())
    return ConfigurationSync("drift" if found else "in step", len(chosen), found)


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def _read_text(uri: str, s3: Any | None) -> str | None:
    if uri.startswith("s3://") and s3 is None:
        return None
    return read_text(uri, s3)


def _write_text(uri: str, text: str, s3: Any | None) -> None:
    if uri.startswith("s3://"):
        bucket, key = _split(uri)
        if s3 is None:
            raise SourceCatalogError(f"No S3 client to write {uri}.")
        s3.put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"), ContentType="application/yaml")
        return
    Path(uri).parent.mkdir(parents=True, exist_ok=True)
    Path(uri).write_text(text, encoding="utf-8")


def prepare_job_configuration(settings: SourceSettings | None, config_uri: str, silver_database: str | None) -> None:
    """What the full-load job runs before it loads anything (nothing without a source secret): the
    configuration written from the catalog when none was uploaded, else its drift logged. A source
    that cannot be read stops the job only when there is no configuration to load with."""
    if settings is None:
        return
    import boto3

    s3 = boto3.client("s3") if config_uri.startswith("s3://") else None
    try:
        address = source_address(settings, boto3.client("secretsmanager"), boto3.client("glue"))
        sync = sync_configuration(config_uri, address, silver_database, s3)
    except SourceCatalogError as exc:
        if _read_text(config_uri, s3) is None:
            raise
        log.warning("source catalog not checked: %s", exc)
        return
    log.info("source catalog outcome=%s tables=%d drift=%d", sync.outcome, sync.tables, len(sync.drift))

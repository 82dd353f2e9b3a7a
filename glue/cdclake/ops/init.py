"""``cdclake init``: write the table configuration from a source database's catalog, add only the
new tables to it, or report how it drifted from the catalog (``--check``)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cdclake.config import load_config, parse_config
from cdclake.errors import CdclakeError, ConfigError
from cdclake.ops.drift import drift, drift_report
from cdclake.sources.catalog.connect import SourceAddress, parse_source, read_catalog
from cdclake.sources.catalog.model import CatalogTable
from cdclake.sources.catalog.plan import (
    BronzeDefaults,
    Selection,
    add_tables,
    configuration_text,
    select_tables,
    silver_targets,
    written_by_init,
)

log = logging.getLogger("cdclake.init")

CatalogReader = Callable[[SourceAddress], list[CatalogTable]]


@dataclass(frozen=True)
class InitSettings:
    """Everything ``cdclake init`` is given; every knob has a default."""

    source_url: str  # postgresql://user:password@host:5432/db, mysql://..., sqlserver://..., or host=... dbname=...
    config_path: Path = Path("cdclake.yaml")
    include: tuple[str, ...] = ()  # schema.table globs; none: every table (MySQL: the URL's database)
    exclude: tuple[str, ...] = ()
    force: bool = False  # overwrite a file that was edited by hand (or not written by init)
    add_new: bool = False  # add only the tables the file does not have yet
    check: bool = False  # compare, print, exit 1 on drift; write nothing
    database: str | None = None  # silver.database; default: the source database's name
    bronze: BronzeDefaults = field(default_factory=BronzeDefaults)

    def __post_init__(self) -> None:
        if self.add_new and self.force:
            raise CdclakeError("--add-new keeps the file and --force replaces it: choose one.")


def default_database(address: SourceAddress) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", address.database).lower()
    return name if re.match(r"^[a-z_]", name) else "cdclake"


def default_include(address: SourceAddress) -> tuple[str, ...]:
    """Every table, except for MySQL with a database in the URL: that database is the schema meant."""
    return (f"{address.database}.*",) if address.engine == "mysql" and address.database else ()


def selected_tables(
    address: SourceAddress, tables: Sequence[CatalogTable], include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> Selection:
    """The tables to configure, with a warning for each one left out."""
    selection = select_tables(tables, tuple(include) or default_include(address), exclude)
    for reason in selection.skipped:
        log.warning("table left out: %s", reason)
    return selection


def init(settings: InitSettings, read: CatalogReader = read_catalog, out: Callable[[str], None] = print) -> int:
    """Run ``cdclake init``; the exit code (0, or 1 for drift with ``check``)."""
    address = parse_source(settings.source_url)
    catalog = read(address)
    selection = selected_tables(address, catalog, settings.include, settings.exclude)
    path = settings.config_path
    if settings.check:
        config = load_config(path)
        if not (settings.include or settings.exclude):  # the globs the file was written with
            selection = selected_tables(address, catalog, config.source_include, config.source_exclude)
        found = drift(config, selection.tables, catalog)
        out(drift_report(found).rstrip("\n"))
        for warning in (w for t in selection.tables for w in t.warnings):
            out(f"warning: {warning}")
        return 1 if found else 0
    if not selection.tables:
        patterns = ", ".join(settings.include) or "every table"
        raise CdclakeError(f"No table of {address.describe()} matches {patterns}: nothing to write.")
    for table in selection.tables:
        for warning in table.warnings:
            log.warning("%s", warning)
        if not table.key:
            log.warning(
                "%s has no primary key (nor a unique index DMS would use): configured append_only: true, "
                "so every change row is appended instead of updating a row",
                table.qualified,
            )
    if path.exists() and settings.add_new:
        return _add_new(settings, address, catalog, out)
    if path.exists() and not settings.force:
        origin = written_by_init(path.read_text(encoding="utf-8"))
        if origin is None or not origin[1]:
            raise CdclakeError(
                f"{path} was edited by hand (or not written by cdclake init): pass --force to overwrite it, "
                "or --add-new to add only the tables it does not have."
            )
    database = settings.database or default_database(address)
    text = configuration_text(
        address.engine, selection.tables, settings.bronze, database, settings.include, settings.exclude
    )
    parse_config(text, str(path))  # what is written must load: a mapping bug fails here, not in a job
    _write(path, text)
    _say_targets(silver_targets(selection.tables), out)
    keyed = sum(t.key_source == "primary key" for t in selection.tables)
    unique = sum(t.key_source == "unique index" for t in selection.tables)
    appended = len(selection.tables) - keyed - unique
    out(
        f"init: wrote {path}: {len(selection.tables)} table(s) from {address.describe()} "
        f"({keyed} by primary key, {unique} by unique index, {appended} append-only)"
    )
    return 0


def _add_new(
    settings: InitSettings, address: SourceAddress, catalog: Sequence[CatalogTable], out: Callable[[str], None]
) -> int:
    """``init --add-new``: the selected tables the file lacks, appended; the file is written only if
    the whole result loads (a configuration every command refuses is never left behind)."""
    path = settings.config_path
    text = path.read_text(encoding="utf-8")
    config = load_config(path)
    if settings.include or settings.exclude:
        selection = selected_tables(address, catalog, settings.include, settings.exclude)
    else:  # the globs the file was written with
        selection = selected_tables(address, catalog, config.source_include, config.source_exclude)
    configured = {t.source for t in config.tables}
    new = [t for t in selection.tables if t.qualified not in configured]
    # named like a configured table (or its silver table): a schema-prefixed silver name too
    targets = silver_targets(new, [name for t in config.tables for name in (t.target, t.source_table)])
    if new:
        updated = add_tables(text, new, str(path), targets)
        try:
            parse_config(updated, str(path))
        except ConfigError as exc:
            raise CdclakeError(f"{path} is left as it was: with the new table(s) it would not load ({exc}).") from None
        _write(path, updated)
    out(f"init: added {len(new)} new table(s) to {path}" + (f": {', '.join(t.qualified for t in new)}" if new else ""))
    _say_targets(targets, out)
    return 0


def _say_targets(targets: dict[str, str], out: Callable[[str], None]) -> None:
    for source, target in targets.items():
        out(f"init: {source} goes to silver table {target} (another table of that name is configured too)")


def _write(path: Path, text: str) -> None:
    """Write through a temporary file and a rename: a reader never sees half a configuration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)

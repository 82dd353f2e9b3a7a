"""The table configuration file: one YAML document read once, validated, and passed down.

Every mistake names its line: unknown keys, bad types, missing primary keys in the column list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from cdclake.columns import HISTORY_SUFFIX
from cdclake.errors import ConfigError
from cdclake.identifiers import name_problem
from cdclake.mart_config import GoldSettings, parse_gold, with_silver_database
from cdclake.types import fraction_digits
from cdclake.yaml_doc import YamlDoc

if TYPE_CHECKING:
    from botocore.config import Config

# The Iceberg catalog silver tables live in, locally and on AWS Glue.
DEFAULT_CATALOG = "silver"

BronzeFormat = Literal["csv", "parquet"]
# A table's ``layout``: how its files cluster its keys (``lake.layout`` gives a table one)
Layout = Literal["none", "sorted", "bucket"]
LAYOUTS: tuple[Layout, ...] = ("none", "sorted", "bucket")


@dataclass(frozen=True)
class CleaningRules:
    """Declarative bronze -> silver cleaning, applied in this order: cast, derive, rename, drop."""

    cast: dict[str, str] = field(default_factory=dict)
    derive: dict[str, str] = field(default_factory=dict)  # new column -> Spark SQL expression
    rename: dict[str, str] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    # Integer and decimal columns (source names) whose values are rounded half up to the type's
    # scale; elsewhere a value with more fraction digits than its type stores is a bad row.
    round: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableConfig:
    """One source table (``schema.table`` as DMS lays it out) and its silver table."""

    source_schema: str
    source_table: str
    target: str
    primary_key: tuple[str, ...] = ()
    append_only: bool = False
    columns: dict[str, str] = field(default_factory=dict)  # source column -> type, in file order
    clean: CleaningRules = field(default_factory=CleaningRules)
    history: bool = False  # keep <target>__history: every version of every row (SCD type 2)
    # How silver's files are clustered so that a batch's key lookup reads few of them:
    # "sorted" (files ordered by the key; the default for keyed tables), "bucket" or "none".
    layout: Layout = "none"
    # How long the table may go without a CDC file while the task runs before it is alerted as silent
    # (engine/silence.py): None derives it from the table's own recent files, 0 does not watch it.
    silent_after_minutes: int | None = None

    @property
    def source(self) -> str:
        return f"{self.source_schema}.{self.source_table}"

    @property
    def is_keyed(self) -> bool:
        return bool(self.primary_key)

    def silver_key(self) -> tuple[str, ...]:
        """Primary-key column names as they appear in silver (after renames)."""
        return tuple(self.clean.rename.get(k, k) for k in self.primary_key)


@dataclass(frozen=True)
class StoreSettings:
    """How the bronze store talks to S3 (``bronze.s3``): passed to the store by the shell."""

    retry_mode: Literal["standard", "adaptive"] = "standard"  # adaptive also rate-limits the client
    max_attempts: int = 10  # per S3 call, the first one included (botocore's retries)
    connect_timeout_seconds: float = 10.0
    read_timeout_seconds: float = 60.0  # a socket silent this long is a timeout, then retried
    body_attempts: int = 5  # an object body that breaks mid-stream is resumed this many times in all
    backoff_seconds: float = 0.5  # first wait before resuming a body; doubles up to 20 s, with jitter
    chunk_bytes: int = 8 << 20  # bytes read from a body per call while staging

    def client_config(self) -> Config:
        """The botocore configuration every bronze S3 client is made with."""
        from botocore.config import Config

        return Config(
            # total_max_attempts counts the first try; the dict's "max_attempts" would count retries only
            retries={"mode": self.retry_mode, "total_max_attempts": self.max_attempts},
            connect_timeout=self.connect_timeout_seconds,
            read_timeout=self.read_timeout_seconds,
        )


@dataclass(frozen=True)
class BronzeSettings:
    """How the DMS target endpoint writes files (mirror the endpoint's S3 settings here)."""

    path: str = "bronze"  # local directory or s3://bucket/prefix (BucketFolder included)
    format: BronzeFormat = "csv"  # DataFormat
    csv_header: bool = False  # AddColumnName
    csv_delimiter: str = ","  # CsvDelimiter
    csv_null_value: str = ""  # CsvNullValue; real DMS output writes NULL as an empty unquoted field
    csv_no_sup_value: str | None = None  # CsvNoSupValue: a column the update did not capture
    include_op_for_full_load: bool = False  # IncludeOpForFullLoad
    timestamp_column: str | None = None  # TimestampColumnName
    change_sequence_column: str | None = None  # a transformation-added AR_H_CHANGE_SEQ column
    transaction_path: str | None = None  # CdcPath with PreserveTransactions: multi-table CDC files
    s3: StoreSettings = field(default_factory=StoreSettings)  # retries and timeouts of bronze on S3
    # CSV files at least this big are read in parallel splits when no value holds a newline (0: never).
    csv_split_bytes: int = 256 << 20
    # How late (after the time in its name) a CDC file may land and still be found by a listing: a
    # table's watermark (``lake.ledger.AppliedKeys``), from which its folder is listed, stays this far
    # behind the clock. A file later than this is found by its S3 event or ``run --sweep``.
    look_back_seconds: int = 3600


DEFAULT_MAX_FILES_PER_BATCH = 500
DEFAULT_MAX_BATCH_BYTES = 1 << 30  # 1 GiB of change files: one commit's worth on a 2-worker Glue job
DEFAULT_MAX_BAD_ROW_RATIO = 0.01


@dataclass(frozen=True)
class PipelineConfig:
    bronze: BronzeSettings
    database: str
    tables: tuple[TableConfig, ...]
    max_files_per_batch: int = DEFAULT_MAX_FILES_PER_BATCH
    # A table's batch (one commit) takes files up to this many bytes in all; a larger file is a batch alone.
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    # above this share of bad rows a CDC file is held whole (a full load fails)
    max_bad_row_ratio: float = DEFAULT_MAX_BAD_ROW_RATIO
    # Tables of a run worked on at once (``engine.parallel``); None: ``Engine.parallel_tables`` decides.
    parallel_tables: int | None = None
    gold: GoldSettings = field(default_factory=GoldSettings)  # the gold database and its marts
    # ``source_tables``: the schema.table globs ``init`` chose the tables with (``--include`` /
    # ``--exclude``); ``init --check`` and ``init --add-new`` use them when given none.
    source_include: tuple[str, ...] = ()
    source_exclude: tuple[str, ...] = ()

    def table(self, name: str) -> TableConfig:
        """Find a table by source name (``schema.table``), source table name or silver name."""
        for table in self.tables:
            if name in (table.source, table.source_table, table.target):
                return table
        from cdclake.errors import UnknownTableError

        known = ", ".join(t.source for t in self.tables) or "none"
        raise UnknownTableError(f"Table '{name}' is not in the configuration (known: {known}).")

    def in_database(self, database: str) -> PipelineConfig:
        """The same configuration with silver in ``database`` (the AWS stack's, a test's): the
        marts' SQL, written with ``silver.database``'s table names, reads the new database too."""
        if database == self.database:
            return self
        known = readable_tables(self.database, self.tables)
        return replace(self, database=database, gold=with_silver_database(self.gold, known, database))

    def table_for_source(self, schema: str, table: str) -> TableConfig | None:
        for candidate in self.tables:
            if candidate.source_schema == schema and candidate.source_table == table:
                return candidate
        return None


_TOP_KEYS = {"bronze", "silver", "tables", "cdc", "quarantine", "gold", "marts", "source_tables"}
_BRONZE_KEYS = {
    "path", "format", "csv_header", "csv_delimiter", "csv_null_value", "csv_no_sup_value", "include_op_for_full_load",
    "timestamp_column", "change_sequence_column", "transaction_path", "s3", "split_csv_files_above_mb",
    "look_back_minutes",
}  # fmt: skip
_S3_KEYS = {"retry_mode", "max_attempts", "connect_timeout_seconds", "read_timeout_seconds", "body_attempts"}
_TABLE_KEYS = {"target", "primary_key", "append_only", "columns", "clean", "history", "layout", "silent_after_minutes"}
_CLEAN_KEYS = {"cast", "derive", "rename", "drop", "round"}


def _parse_bronze(doc: YamlDoc, node: Node | None) -> BronzeSettings:
    if node is None:
        return BronzeSettings()
    fields = doc.mapping(node, "bronze", _BRONZE_KEYS)
    defaults = BronzeSettings()
    fmt = doc.scalar(fields["format"], "bronze.format") if "format" in fields else defaults.format
    if fmt not in ("csv", "parquet"):
        raise doc.fail(fields["format"], f"bronze.format must be csv or parquet, not '{fmt}'")
    delimiter = (
        doc.scalar(fields["csv_delimiter"], "bronze.csv_delimiter")
        if "csv_delimiter" in fields
        else defaults.csv_delimiter
    )
    if len(delimiter) != 1:
        raise doc.fail(fields["csv_delimiter"], "bronze.csv_delimiter must be one character")

    def optional_name(key: str) -> str | None:
        return doc.identifier(fields[key], f"bronze.{key}") if key in fields else None

    return BronzeSettings(
        path=doc.scalar(fields["path"], "bronze.path") if "path" in fields else defaults.path,
        format="parquet" if fmt == "parquet" else "csv",
        csv_header=doc.boolean(fields["csv_header"], "bronze.csv_header")
        if "csv_header" in fields
        else defaults.csv_header,
        csv_delimiter=delimiter,
        csv_null_value=doc.scalar(fields["csv_null_value"], "bronze.csv_null_value")
        if "csv_null_value" in fields
        else defaults.csv_null_value,
        csv_no_sup_value=doc.scalar(fields["csv_no_sup_value"], "bronze.csv_no_sup_value")
        if "csv_no_sup_value" in fields
        else None,
        include_op_for_full_load=doc.boolean(fields["include_op_for_full_load"], "bronze.include_op_for_full_load")
        if "include_op_for_full_load" in fields
        else defaults.include_op_for_full_load,
        timestamp_column=optional_name("timestamp_column"),
        transaction_path=doc.scalar(fields["transaction_path"], "bronze.transaction_path").strip("/")
        if "transaction_path" in fields
        else None,
        change_sequence_column=optional_name("change_sequence_column"),
        s3=_parse_s3(doc, fields.get("s3")),
        csv_split_bytes=_parse_split(doc, fields.get("split_csv_files_above_mb"), defaults.csv_split_bytes),
        look_back_seconds=60 * doc.integer(fields["look_back_minutes"], "bronze.look_back_minutes")
        if "look_back_minutes" in fields
        else defaults.look_back_seconds,
    )


def _parse_split(doc: YamlDoc, node: Node | None, default: int) -> int:
    """``bronze.split_csv_files_above_mb``: a number of MiB (fractions allowed), 0 for never."""
    if node is None:
        return default
    mib = doc.number(node, "bronze.split_csv_files_above_mb", lambda v: 0 <= v < 1 << 30, "a number of MiB, 0 or more")
    return round(mib * (1 << 20))


def _parse_s3(doc: YamlDoc, node: Node | None) -> StoreSettings:
    """``bronze.s3``: how patiently bronze on S3 is read (botocore retries, timeouts, body resumes)."""
    defaults = StoreSettings()
    if node is None:
        return defaults
    fields = doc.mapping(node, "bronze.s3", _S3_KEYS)
    mode = doc.scalar(fields["retry_mode"], "bronze.s3.retry_mode") if "retry_mode" in fields else "standard"
    if mode not in ("standard", "adaptive"):
        raise doc.fail(fields["retry_mode"], f"bronze.s3.retry_mode must be standard or adaptive, not '{mode}'")

    def seconds(key: str, default: float) -> float:
        if key not in fields:
            return default
        return doc.number(fields[key], f"bronze.s3.{key}", lambda v: v > 0, "a number of seconds above 0")

    def count(key: str, default: int) -> int:
        return doc.integer(fields[key], f"bronze.s3.{key}") if key in fields else default

    return StoreSettings(
        retry_mode="adaptive" if mode == "adaptive" else "standard",
        max_attempts=count("max_attempts", defaults.max_attempts),
        connect_timeout_seconds=seconds("connect_timeout_seconds", defaults.connect_timeout_seconds),
        read_timeout_seconds=seconds("read_timeout_seconds", defaults.read_timeout_seconds),
        body_attempts=count("body_attempts", defaults.body_attempts),
    )


def _parse_clean(doc: YamlDoc, node: Node | None, where: str, columns: dict[str, str]) -> CleaningRules:
    if node is None:
        return CleaningRules()
    fields = doc.mapping(node, where, _CLEAN_KEYS)
    cast = doc.typed_columns(fields["cast"], f"{where}.cast") if "cast" in fields else {}
    derive: dict[str, str] = {}
    if "derive" in fields:
        for name, expr in doc.free_mapping(fields["derive"], f"{where}.derive").items():
            problem = name_problem(name)
            if problem:
                raise doc.fail(expr, f"derived column name '{name}' is not valid: {problem}")
            derive[name] = doc.scalar(expr, f"expression of derived column '{name}'")
    rename: dict[str, str] = {}
    if "rename" in fields:
        for old, new in doc.free_mapping(fields["rename"], f"{where}.rename").items():
            rename[old] = doc.identifier(new, f"new name of '{old}'")
    drop = doc.identifiers(fields["drop"], f"{where}.drop") if "drop" in fields else ()
    rounded = doc.identifiers(fields["round"], f"{where}.round") if "round" in fields else ()
    types = {**columns, **cast}
    for name in rounded:
        if name not in types or fraction_digits(types[name]) is None:
            raise doc.fail(
                fields["round"],
                f"{where}.round names '{name}', which columns or cast do not declare as an integer or decimal type",
            )
    return CleaningRules(cast=cast, derive=derive, rename=rename, drop=drop, round=rounded)


def _parse_table(doc: YamlDoc, source_node: Node, node: Node, bronze: BronzeSettings) -> TableConfig:
    source = doc.scalar(source_node, "a table name")
    parts = source.split(".")
    if len(parts) != 2:
        raise doc.fail(source_node, f"table '{source}' must be written as schema.table")
    for part in parts:
        problem = name_problem(part)
        if problem:
            raise doc.fail(source_node, f"table '{source}': '{part}' cannot be a schema or table name: {problem}")
    where = f"table {source}"
    fields = doc.mapping(node, where, _TABLE_KEYS) if node.tag != "tag:yaml.org,2002:null" else {}
    key = doc.identifiers(fields["primary_key"], f"{where}.primary_key") if "primary_key" in fields else ()
    append_only = doc.boolean(fields["append_only"], f"{where}.append_only") if "append_only" in fields else False
    if key and append_only:
        raise doc.fail(fields["append_only"], f"{where} has a primary key and append_only: choose one")
    columns = doc.typed_columns(fields["columns"], f"{where}.columns") if "columns" in fields else {}
    history = doc.boolean(fields["history"], f"{where}.history") if "history" in fields else False
    if history and not key:
        raise doc.fail(fields["history"], f"{where}.history needs a primary_key (versions are kept per key)")
    layout: Layout = "sorted" if key else "none"
    if "layout" in fields:
        chosen = doc.scalar(fields["layout"], f"{where}.layout")
        if chosen not in LAYOUTS:
            raise doc.fail(fields["layout"], f"{where}.layout must be one of {', '.join(LAYOUTS)}")
        if chosen != "none" and not key:
            raise doc.fail(fields["layout"], f"{where}.layout clusters by the primary key: declare primary_key")
        layout = chosen
    if columns:
        missing = [k for k in key if k not in columns]
        if missing:
            raise doc.fail(fields["primary_key"], f"primary key column(s) {', '.join(missing)} not in {where}.columns")
    if bronze.format == "csv" and not bronze.csv_header and not columns:
        raise doc.fail(
            node if fields else source_node,
            f"{where} needs 'columns' (names and types in file order) because bronze CSV files have no header",
        )
    return TableConfig(
        source_schema=parts[0],
        source_table=parts[1],
        target=doc.identifier(fields["target"], f"{where}.target") if "target" in fields else parts[1],
        primary_key=key,
        append_only=append_only,
        columns=columns,
        clean=_parse_clean(doc, fields.get("clean"), f"{where}.clean", columns),
        history=history,
        layout=layout,
        silent_after_minutes=(
            doc.integer(fields["silent_after_minutes"], f"{where}.silent_after_minutes", minimum=0)
            if "silent_after_minutes" in fields
            else None
        ),
    )


def gold_database(config: PipelineConfig) -> str:
    """Where the marts live: ``gold.database``, by default the silver database name + ``_gold``."""
    return config.gold.database or f"{config.database}_gold"


def _parse_source_tables(doc: YamlDoc, node: Node | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``source_tables``: ``include`` and ``exclude``, each a glob or a list of globs."""
    if node is None:
        return (), ()
    fields = doc.mapping(node, "source_tables", {"include", "exclude"})

    def globs(key: str) -> tuple[str, ...]:
        if key not in fields:
            return ()
        item = fields[key]
        if isinstance(item, SequenceNode):
            return tuple(doc.scalar(n, f"source_tables.{key}") for n in item.value)
        return (doc.scalar(item, f"source_tables.{key}"),)

    return globs("include"), globs("exclude")


def readable_tables(database: str, tables: Sequence[TableConfig]) -> dict[str, str]:
    """``database.table`` names a mart may read -> silver table name (history tables included)."""
    names: dict[str, str] = {}
    for table in tables:
        names[f"{database}.{table.target}"] = table.target
        if table.history:
            names[f"{database}.{table.target}{HISTORY_SUFFIX}"] = f"{table.target}{HISTORY_SUFFIX}"
    return names


def _yaml_error(exc: yaml.YAMLError, text: str, source: str) -> ConfigError:
    """One sentence with the line (and column) for a YAML syntax error; PyYAML's own text spans
    several lines and names "<unicode string>" instead of the file."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = f"{exc.problem} ({exc.context})" if exc.context else str(exc.problem)
        return ConfigError(f"{source}, line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}")
    if isinstance(exc, yaml.reader.ReaderError):
        line = text[: exc.position].count("\n") + 1
        return ConfigError(f"{source}, line {line}: not valid YAML: character {exc.character!r} is not allowed")
    return ConfigError(f"{source}, line 1: not valid YAML: {' '.join(str(exc).split())}")


def parse_config(text: str, source: str = "<config>") -> PipelineConfig:
    """Parse and validate a configuration document; raise ``ConfigError`` naming the line."""
    doc = YamlDoc(source)
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    except RecursionError:  # nesting deeper than the parser's stack; no configuration is that deep
        raise ConfigError(f"{source}, line 1: not valid YAML: nested too deeply") from None
    if root is None:
        raise ConfigError(f"{source} is empty: it needs at least a 'tables' section.")
    top = doc.mapping(root, "the configuration", _TOP_KEYS)
    bronze = _parse_bronze(doc, top.get("bronze"))
    database = "cdclake"
    if "silver" in top:
        silver = doc.mapping(top["silver"], "silver", {"database"})
        if "database" in silver:
            database = doc.identifier(silver["database"], "silver.database")
    max_files = DEFAULT_MAX_FILES_PER_BATCH
    max_batch_bytes = DEFAULT_MAX_BATCH_BYTES
    parallel_tables = None
    if "cdc" in top:
        cdc = doc.mapping(top["cdc"], "cdc", {"max_files_per_batch", "max_batch_mb", "parallel_tables"})
        if "max_files_per_batch" in cdc:
            max_files = doc.integer(cdc["max_files_per_batch"], "cdc.max_files_per_batch")
        if "max_batch_mb" in cdc:
            max_batch_bytes = doc.integer(cdc["max_batch_mb"], "cdc.max_batch_mb") << 20
        if "parallel_tables" in cdc:
            parallel_tables = doc.integer(cdc["parallel_tables"], "cdc.parallel_tables")
    max_bad_row_ratio = DEFAULT_MAX_BAD_ROW_RATIO
    if "quarantine" in top:
        quarantine = doc.mapping(top["quarantine"], "quarantine", {"max_bad_row_ratio"})
        if "max_bad_row_ratio" in quarantine:
            max_bad_row_ratio = doc.number(
                quarantine["max_bad_row_ratio"],
                "quarantine.max_bad_row_ratio",
                lambda v: 0.0 <= v <= 1.0,
                "a number from 0 to 1",
            )
    if "tables" not in top:
        raise doc.fail(root, "the configuration needs a 'tables' section")
    tables_node = top["tables"]
    if not isinstance(tables_node, MappingNode) or not tables_node.value:
        raise doc.fail(tables_node, "'tables' must map schema.table names to their settings")
    seen_sources: set[str] = set()
    for key_node, _ in tables_node.value:
        name = doc.scalar(key_node, "a table name")
        if name in seen_sources:
            raise doc.fail(key_node, f"duplicate table '{name}' in tables")
        seen_sources.add(name)
    tables = tuple(_parse_table(doc, k, v, bronze) for k, v in tables_node.value)
    targets = [t.target for t in tables]
    duplicates = sorted({t for t in targets if targets.count(t) > 1})
    if duplicates:
        raise doc.fail(tables_node, f"several tables write to the same silver table: {', '.join(duplicates)}")
    include, exclude = _parse_source_tables(doc, top.get("source_tables"))
    return PipelineConfig(
        bronze=bronze,
        database=database,
        tables=tables,
        max_files_per_batch=max_files,
        max_batch_bytes=max_batch_bytes,
        parallel_tables=parallel_tables,
        max_bad_row_ratio=max_bad_row_ratio,
        gold=parse_gold(doc, top.get("gold"), top.get("marts"), database, readable_tables(database, tables)),
        source_include=include,
        source_exclude=exclude,
    )


def load_config(path: Path) -> PipelineConfig:
    """Read the configuration file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"The configuration file {path} does not exist.") from None
    except OSError as exc:
        raise ConfigError(f"The configuration file {path} cannot be read: {exc.strerror}.") from None
    return parse_config(text, str(path))

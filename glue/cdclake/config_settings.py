"""Every key of the configuration file, declared once: its section, name, type, default, doc line and reader.

From ``SETTINGS`` come the keys each section allows (an unknown key is refused with its line), the values
read (``read_section``: each reader's error names the line and says what the key must be), the defaults of
the values' dataclasses (``DEFAULTS``: the table and bronze ones are below, beside their keys),
docs/configuration.md's table (``settings_table``, written by ``make docs-tables``) and the keys the
configuration fuzz test tries. A key whose ``read`` is None is read by its section's own parser in
``config.py`` or ``mart_config.py`` (a nested section, a mart's SQL). tests/unit/test_config_settings.py
checks that every key fills a field of its section's dataclass with its declared default, and back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from yaml.nodes import Node, SequenceNode

from cdclake.yaml_doc import YamlDoc

if TYPE_CHECKING:
    from botocore.config import Config

# How a key's value is read: (the document, the value's node, "section.key" for messages) -> the field's value.
Reader = Callable[[YamlDoc, Node, str], Any]

# A section's name in the file, as the docs table writes it (a table's and a mart's are per item).
SECTIONS = {
    "bronze": "bronze",
    "bronze.s3": "bronze.s3",
    "silver": "silver",
    "cdc": "cdc",
    "quarantine": "quarantine",
    "gold": "gold",
    "source_tables": "source_tables",
    "table": "tables.<schema.table>",
    "table.clean": "tables.<schema.table>.clean",
    "mart": "marts[]",
}
BronzeFormat = Literal["csv", "parquet"]
# A table's ``layout``: how its files cluster its keys (``lake.layout`` gives a table one)
Layout = Literal["none", "sorted", "bucket"]
LAYOUTS: tuple[Layout, ...] = ("none", "sorted", "bucket")


@dataclass(frozen=True)
class Setting:
    """One key of the configuration file."""

    section: str  # a key of SECTIONS
    key: str
    kind: str  # the type, as the docs table says it
    default: Any  # what the dataclass field holds when the key is left out (in the field's unit)
    doc: str  # one line: what it does
    read: Reader | None  # None: its section's parser reads it
    field: str = ""  # the dataclass field it fills; "" for the key itself
    shown: str = ""  # the default as the docs show it; "" for the YAML form of ``default``

    @property
    def attribute(self) -> str:
        return self.field or self.key

    @property
    def path(self) -> str:
        return f"{SECTIONS[self.section]}.{self.key}"


def _one_of(options: tuple[str, ...], sentence: Callable[[str, str], str]) -> Reader:
    def read(doc: YamlDoc, node: Node, what: str) -> str:
        value = doc.scalar(node, what)
        if value not in options:
            raise doc.fail(node, sentence(what, value))
        return value

    return read


def _number(accept: Callable[[float], bool], expected: str, scale: float = 1.0) -> Reader:
    """A finite number ``accept`` takes, times ``scale`` (MiB -> bytes: rounded to an integer)."""

    def read(doc: YamlDoc, node: Node, what: str) -> float | int:
        value = doc.number(node, what, accept, expected)
        return value if scale == 1.0 else round(value * scale)

    return read


def _character(doc: YamlDoc, node: Node, what: str) -> str:
    value = doc.scalar(node, what)
    if len(value) != 1:
        raise doc.fail(node, f"{what} must be one character")
    return value


def _globs(doc: YamlDoc, node: Node, what: str) -> tuple[str, ...]:
    if isinstance(node, SequenceNode):
        return tuple(doc.scalar(n, what) for n in node.value)
    return (doc.scalar(node, what),)


def _text(doc: YamlDoc, node: Node, what: str) -> str:
    return doc.scalar(node, what)


def _flag(doc: YamlDoc, node: Node, what: str) -> bool:
    return doc.boolean(node, what)


def _count(doc: YamlDoc, node: Node, what: str) -> int:
    return doc.integer(node, what)


def _name(doc: YamlDoc, node: Node, what: str) -> str:
    return doc.identifier(node, what)


def _names(doc: YamlDoc, node: Node, what: str) -> tuple[str, ...]:
    return doc.identifiers(node, what)


def _columns(doc: YamlDoc, node: Node, what: str) -> dict[str, str]:
    return doc.typed_columns(node, what)


_MIB = float(1 << 20)
_FORMAT = _one_of(("csv", "parquet"), lambda what, v: f"{what} must be csv or parquet, not '{v}'")
_RETRY_MODE = _one_of(("standard", "adaptive"), lambda what, v: f"{what} must be standard or adaptive, not '{v}'")
_LAYOUT = _one_of(LAYOUTS, lambda what, _: f"{what} must be one of {', '.join(LAYOUTS)}")
_SECONDS = _number(lambda v: v > 0, "a number of seconds above 0")
_S = Setting

SETTINGS: tuple[Setting, ...] = (
    _S("bronze", "format", "csv or parquet", "csv", "DataFormat of the endpoint (.gz files are read as gzip)", _FORMAT),
    _S("bronze", "csv_delimiter", "one character", ",", "CsvDelimiter", _character),
    _S("bronze", "path", "text", "bronze", "directory (relative to the file) or s3://bucket/prefix", _text),
    _S("bronze", "csv_header", "true/false", False, "AddColumnName: CSV files start with a header row", _flag),
    _S("bronze", "csv_null_value", "text", "", "CsvNullValue; DMS writes NULL as an empty unquoted field", _text),
    _S("bronze", "csv_no_sup_value", "text", None, "CsvNoSupValue: the marker of a column not captured", _text),
    _S("bronze", "include_op_for_full_load", "true/false", False, "IncludeOpForFullLoad", _flag),
    _S("bronze", "timestamp_column", "name", None, "TimestampColumnName (commit time for CDC)", _name),
    _S("bronze", "transaction_path", "text", None, "CdcPath with PreserveTransactions: multi-table CDC files",
       lambda doc, node, what: doc.scalar(node, what).strip("/")),
    _S("bronze", "change_sequence_column", "name", None, "a transformation-added AR_H_CHANGE_SEQ column", _name),
    _S("bronze", "s3", "mapping", None, "how patiently bronze on S3 is read (the keys below)", None, shown="below"),
    _S("bronze", "split_csv_files_above_mb", "number of MiB, 0 or more", 256 << 20,
       "CSV files this big are read in parallel splits when no value spans lines (0: never)",
       _number(lambda v: 0 <= v < 1 << 30, "a number of MiB, 0 or more", _MIB), "csv_split_bytes", "256"),
    _S("bronze", "look_back_minutes", "integer >= 1", 3600,
       "how late a CDC file may land and still be found by the listing from each table's watermark",
       lambda doc, node, what: 60 * doc.integer(node, what), "look_back_seconds", "60"),
    _S("bronze.s3", "retry_mode", "standard or adaptive", "standard", "botocore retries; adaptive also rate-limits",
       _RETRY_MODE),
    _S("bronze.s3", "max_attempts", "integer >= 1", 10, "per S3 call, the first one included", _count),
    _S("bronze.s3", "connect_timeout_seconds", "seconds above 0", 10.0, "connecting to S3", _SECONDS),
    _S("bronze.s3", "read_timeout_seconds", "seconds above 0", 60.0, "a connection silent this long is retried",
       _SECONDS),
    _S("bronze.s3", "body_attempts", "integer >= 1", 5, "an object body that breaks is resumed this often in all",
       _count),
    _S("silver", "database", "name", "cdclake", "the silver database (Glue Data Catalog or local)", _name),
    _S("silver", "cut_tag_days", "integer >= 0", 7, "days of source time each table keeps the hourly dated "
       "tags of the published cuts (`cdclake_cut_<T>`, docs/cuts.md; 0: none)",
       lambda doc, node, what: doc.integer(node, what, minimum=0)),
    _S("cdc", "max_files_per_batch", "integer >= 1", 500, "a table's batch (one commit) takes at most this many files",
       _count),
    _S("cdc", "max_batch_mb", "integer >= 1", 1 << 30, "... and this many MB of them (a larger file is a batch alone)",
       lambda doc, node, what: doc.integer(node, what) << 20, "max_batch_bytes", "1024"),
    _S("cdc", "parallel_tables", "integer >= 1", None, "tables of a run (and marts) worked on at once", _count,
       shown="Spark's parallelism, 2 to 8"),
    _S("quarantine", "max_bad_row_ratio", "number from 0 to 1", 0.01,
       "a CDC file with a larger share of bad rows is held whole (a full load fails)",
       _number(lambda v: 0.0 <= v <= 1.0, "a number from 0 to 1")),
    _S("source_tables", "include", "glob or list", (), "the schema.table globs `init` chose tables with", _globs,
       "source_include", "all"),
    _S("source_tables", "exclude", "glob or list", (), "the globs `init` left tables out with", _globs,
       "source_exclude", "none"),
    _S("gold", "database", "plain name", None, "the marts' database (not silver's)",
       lambda doc, node, what: doc.identifier(node, what, plain=True), shown="`<silver database>_gold`"),
    _S("gold", "full_refresh_share", "number above 0", 1 / 3,
       "a keyed mart refreshes in full when finding its changed groups reads this share of a full refresh",
       _number(lambda v: v > 0, "a number above 0"), shown="0.33"),
    _S("gold", "full_refresh_below_mb", "number of MiB, 0 or more", 64 << 20,
       "... or when the tables it reads hold less than this", _number(lambda v: v >= 0, "a number of MiB, 0 or more",
       _MIB), "full_refresh_below_bytes", "64"),
    _S("table", "primary_key", "name or list", (), "the key columns (composite: `[a, b]`)", _names),
    _S("table", "append_only", "true/false", False, "no key: every change row is appended", _flag),
    _S("table", "columns", "name: type", {}, "the columns in file order with their types (headerless CSV)",
       _columns, shown="from the files"),
    _S("table", "history", "true/false", False, "keep `<target>__history`: every version of every row", _flag),
    _S("table", "layout", "none, sorted or bucket", "none", "how silver's files cluster the key", _LAYOUT,
       shown="sorted with a primary_key, else none"),
    _S("table", "target", "name", "", "the silver table", _name, shown="the source table's name"),
    _S("table", "clean", "mapping", None, "cleaning rules (the keys below), applied in their order", None,
       shown="none"),
    _S("table", "silent_after_minutes", "integer >= 0", None, "minutes without a CDC file before the table is "
       "alerted as silent (0: not watched)", lambda doc, node, what: doc.integer(node, what, minimum=0),
       shown="from its recent files"),
    _S("table.clean", "cast", "name: type", {}, "columns cast to another type", _columns),
    _S("table.clean", "derive", "name: SQL", {}, "new columns from Spark SQL expressions", None),
    _S("table.clean", "rename", "name: name", {}, "columns renamed in silver", None),
    _S("table.clean", "drop", "name or list", (), "columns left out of silver", _names),
    _S("table.clean", "round", "name or list", (), "integer/decimal columns rounded half up instead of refused",
       _names),
    _S("mart", "name", "plain name", "", "the mart's table in the gold database", None, shown="required"),
    _S("mart", "sql", "SQL", "", "a SELECT over silver tables and other marts", None, shown="required"),
    _S("mart", "keys", "name or list", (), "its group-by key: an incremental refresh of the changed groups", None),
    _S("mart", "partition_by", "name or list", (), "the mart table's partition columns", None),
    _S("mart", "consistent", "true/false", False, "computed at one source cut every table it reads reached", None),
)  # fmt: skip

# "section.key" -> its declared default: what the dataclass field holds when the key is left out.
DEFAULTS: Mapping[str, Any] = {f"{s.section}.{s.key}": s.default for s in SETTINGS}


# The values of the table and bronze sections, filled from the keys above (``config.py`` reads the file; the
# other sections' values are ``config.PipelineConfig``'s and ``mart_config.GoldSettings``'s fields).


@dataclass(frozen=True)
class CleaningRules:
    """Declarative bronze -> silver cleaning, applied in this order: cast, derive, rename, drop.

    Each field is the key of that name (``SETTINGS``, section ``table.clean``)."""

    cast: dict[str, str] = field(default_factory=dict)
    derive: dict[str, str] = field(default_factory=dict)  # new column -> Spark SQL expression
    rename: dict[str, str] = field(default_factory=dict)
    drop: tuple[str, ...] = DEFAULTS["table.clean.drop"]
    # Integer and decimal columns (source names) whose values are rounded half up to the type's
    # scale; elsewhere a value with more fraction digits than its type stores is a bad row.
    round: tuple[str, ...] = DEFAULTS["table.clean.round"]


@dataclass(frozen=True)
class TableConfig:
    """One source table (``schema.table`` as DMS lays it out) and its silver table; each field after the
    source's name is the key of that name (``SETTINGS``, section ``table``)."""

    source_schema: str
    source_table: str
    target: str
    primary_key: tuple[str, ...] = DEFAULTS["table.primary_key"]
    append_only: bool = DEFAULTS["table.append_only"]
    columns: dict[str, str] = field(default_factory=dict)  # source column -> type, in file order
    clean: CleaningRules = field(default_factory=CleaningRules)
    history: bool = DEFAULTS["table.history"]  # keep <target>__history (SCD type 2)
    # "sorted" (files ordered by the key; the default for keyed tables), "bucket" or "none".
    layout: Layout = DEFAULTS["table.layout"]
    # None derives it from the table's own recent files (engine/silence.py), 0 does not watch the table.
    silent_after_minutes: int | None = DEFAULTS["table.silent_after_minutes"]

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
    """How the bronze store talks to S3 (``bronze.s3``): passed to the store by the shell. The fields
    up to ``body_attempts`` are the keys of that name (``SETTINGS``)."""

    retry_mode: Literal["standard", "adaptive"] = DEFAULTS["bronze.s3.retry_mode"]
    max_attempts: int = DEFAULTS["bronze.s3.max_attempts"]  # botocore's total_max_attempts
    connect_timeout_seconds: float = DEFAULTS["bronze.s3.connect_timeout_seconds"]
    read_timeout_seconds: float = DEFAULTS["bronze.s3.read_timeout_seconds"]
    body_attempts: int = DEFAULTS["bronze.s3.body_attempts"]
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
    """How the DMS target endpoint writes files (mirror the endpoint's S3 settings here): each field is
    the key of that name, or of the name its declaration gives (``SETTINGS``)."""

    path: str = DEFAULTS["bronze.path"]  # local directory or s3://bucket/prefix (BucketFolder included)
    format: BronzeFormat = DEFAULTS["bronze.format"]
    csv_header: bool = DEFAULTS["bronze.csv_header"]
    csv_delimiter: str = DEFAULTS["bronze.csv_delimiter"]
    csv_null_value: str = DEFAULTS["bronze.csv_null_value"]
    csv_no_sup_value: str | None = DEFAULTS["bronze.csv_no_sup_value"]
    include_op_for_full_load: bool = DEFAULTS["bronze.include_op_for_full_load"]
    timestamp_column: str | None = DEFAULTS["bronze.timestamp_column"]
    change_sequence_column: str | None = DEFAULTS["bronze.change_sequence_column"]
    transaction_path: str | None = DEFAULTS["bronze.transaction_path"]
    s3: StoreSettings = field(default_factory=StoreSettings)  # retries and timeouts of bronze on S3
    csv_split_bytes: int = DEFAULTS["bronze.split_csv_files_above_mb"]
    # A table's watermark (``lake.ledger_record.AppliedKeys``), from which its folder is listed, stays this far
    # behind the clock. A file later than this is found by its S3 event or ``run --sweep``.
    look_back_seconds: int = DEFAULTS["bronze.look_back_minutes"]


def in_section(section: str) -> tuple[Setting, ...]:
    return tuple(s for s in SETTINGS if s.section == section)


def keys(section: str) -> set[str]:
    """The keys ``section`` allows (any other is refused, naming these)."""
    return {s.key for s in in_section(section)}


def top_keys() -> set[str]:
    """The sections the file's top level allows."""
    return {SECTIONS[s.section].split(".")[0].removesuffix("[]") for s in SETTINGS}


def read_section(doc: YamlDoc, fields: Mapping[str, Node], section: str, where: str) -> dict[str, Any]:
    """The values of the keys of ``fields`` that ``section`` reads by declaration, by field name, in
    declaration order; each reader's error names ``where.key`` and the line."""
    return {
        s.attribute: s.read(doc, fields[s.key], f"{where}.{s.key}")
        for s in in_section(section)
        if s.read and s.key in fields
    }


def _shown(setting: Setting) -> str:
    if setting.shown:
        return setting.shown
    value = setting.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None or value in ((), {}):
        return "none"
    if value == "":
        return '""'
    return f'"{value}"' if value == "," else str(value)


def settings_table() -> str:
    """docs/configuration.md's table of every key (between its ``settings`` markers)."""
    lines = ["| key | type | default | what it does |", "|---|---|---|---|"]
    lines += [f"| `{s.path}` | {s.kind} | {_shown(s)} | {s.doc} |" for s in SETTINGS]
    return "\n".join(lines)

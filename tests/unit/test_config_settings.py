"""config_settings: each key of the configuration file declared once; the dataclasses' fields, the parser's
allowed keys and defaults, and docs/configuration.md's table are made from (or checked against) it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from cdclake.config import BronzeSettings, CleaningRules, PipelineConfig, StoreSettings, TableConfig, parse_config
from cdclake.config_settings import SECTIONS, SETTINGS, Setting, in_section, settings_table
from cdclake.errors import ConfigError
from cdclake.mart_config import GoldSettings, MartConfig

ROOT = Path(__file__).resolve().parents[2]
# Each section's dataclass, and its fields that no key fills (the parser or the code sets them).
HOLDERS: dict[str, tuple[type, set[str]]] = {
    "bronze": (BronzeSettings, set()),
    "bronze.s3": (StoreSettings, {"backoff_seconds", "chunk_bytes"}),
    "silver": (PipelineConfig, set()),
    "cdc": (PipelineConfig, set()),
    "quarantine": (PipelineConfig, set()),
    "source_tables": (PipelineConfig, set()),
    "gold": (GoldSettings, {"marts"}),
    "table": (TableConfig, {"source_schema", "source_table"}),
    "table.clean": (CleaningRules, set()),
    "mart": (MartConfig, set()),
}
PIPELINE_OWN = {"bronze", "tables", "gold"}  # PipelineConfig's fields made from whole sections
REQUIRED = {("silver", "database"), ("table", "target")}  # fields without a default: the parser always passes them


def field_default(holder: type, name: str) -> Any:
    [found] = [f for f in dataclasses.fields(holder) if f.name == name]
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    return "required" if found.default is dataclasses.MISSING else found.default


def test_every_key_fills_a_field_with_its_declared_default_and_every_field_is_a_key() -> None:
    # GIVEN each section's dataclass / WHEN its fields are matched with the section's declarations
    for section, (holder, _) in HOLDERS.items():
        declared = {s.attribute: s for s in in_section(section)}
        # THEN each key's field exists and defaults to the declared value (a derived default: none declared)
        for name, setting in declared.items():
            if setting.read is None and name in ("s3", "clean", "derive", "rename", "name", "sql"):
                continue  # a nested section, or read by its section's parser
            expected = "required" if (section, name) in REQUIRED else setting.default
            assert field_default(holder, name) == expected, (section, name)
    # AND every field of a dataclass is some key's, or named here as set otherwise
    for holder in {h for h, _ in HOLDERS.values()}:
        keyed = {s.attribute for sec, (h, _) in HOLDERS.items() if h is holder for s in in_section(sec)}
        unkeyed = set().union(*(u for h, u in HOLDERS.values() if h is holder))
        own = PIPELINE_OWN if holder is PipelineConfig else set()
        assert {f.name for f in dataclasses.fields(holder)} == keyed | unkeyed | own, holder.__name__


def test_docs_table_is_made_from_the_declarations() -> None:
    # GIVEN docs/configuration.md / WHEN its generated table is cut out / THEN it is settings_table()
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = text.split("<!-- generated: settings -->\n", 1)[1].split("\n<!-- end generated: settings -->", 1)[0]
    assert table == settings_table()
    assert len(table.splitlines()) == len(SETTINGS) + 2


def test_each_key_is_declared_once_with_a_doc_line() -> None:
    paths = [s.path for s in SETTINGS]
    assert len(paths) == len(set(paths)) and set(s.section for s in SETTINGS) == set(SECTIONS)
    assert all(s.doc and s.kind and "|" not in s.doc + s.kind + s.shown for s in SETTINGS)


TABLE = "tables:\n  s.t:\n    primary_key: [id]\n    columns: {id: int}\n"


@pytest.mark.parametrize(
    "setting",
    [s for s in SETTINGS if s.section in ("bronze", "bronze.s3", "cdc")],
    ids=lambda s: f"{s.section}.{s.key}",
)
def test_an_unknown_key_beside_a_declared_one_names_the_declared_keys(setting: Setting) -> None:
    # GIVEN a section with a declared key misspelt / WHEN parsed / THEN refused, naming the section's keys
    misspelt = setting.key + "x"
    section = "bronze:\n  s3:\n" if setting.section == "bronze.s3" else f"{setting.section}:\n"
    indent = "    " if setting.section == "bronze.s3" else "  "
    with pytest.raises(ConfigError, match=f"unknown key '{misspelt}' in {setting.section} \\(allowed: .*{setting.key}"):
        parse_config(f"{section}{indent}{misspelt}: 1\n{TABLE}")


def test_a_value_a_reader_refuses_names_the_key_and_the_line() -> None:
    # GIVEN a declared key of each reader kind given a bad value / WHEN parsed / THEN the key's own sentence
    cases = {
        "bronze:\n  format: orc\n": "line 2: bronze.format must be csv or parquet, not 'orc'",
        "bronze:\n  look_back_minutes: 0\n": "line 2: bronze.look_back_minutes must be an integer >= 1, not '0'",
        "bronze:\n  s3:\n    read_timeout_seconds: 0\n": "line 3: bronze.s3.read_timeout_seconds must be a number of "
        "seconds above 0, not '0'",
        "cdc:\n  max_batch_mb: x\n": "line 2: cdc.max_batch_mb must be an integer >= 1, not 'x'",
        "gold:\n  full_refresh_share: 0\n": "line 2: gold.full_refresh_share must be a number above 0, not '0'",
    }
    for text, message in cases.items():
        with pytest.raises(ConfigError) as raised:
            parse_config(text + TABLE, "c.yaml")
        assert str(raised.value) == f"c.yaml, {message}"


def test_the_keys_units_are_converted_once_where_declared() -> None:
    config = parse_config(
        "bronze:\n  look_back_minutes: 2\n  split_csv_files_above_mb: 0.5\ncdc:\n  max_batch_mb: 3\n"
        "gold:\n  full_refresh_below_mb: 1\n" + TABLE
    )
    assert (config.bronze.look_back_seconds, config.bronze.csv_split_bytes) == (120, 1 << 19)
    assert (config.max_batch_bytes, config.gold.full_refresh_below_bytes) == (3 << 20, 1 << 20)


def test_the_docs_example_of_every_section_is_a_valid_configuration() -> None:
    # GIVEN configuration.md's YAML example / WHEN parsed / THEN it loads: each key it shows is a declared one
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = parse_config(example, "configuration.md")
    assert (config.bronze.s3.max_attempts, [t.target for t in config.tables]) == (10, ["hosts_silver"])

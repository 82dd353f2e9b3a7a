"""Fuzz the configuration reader: whatever the YAML shape or text, ``parse_config`` returns a
configuration or raises ``ConfigError`` naming the file and a line, never another exception.

The examples are derandomized (the same every run) unless CDCLAKE_PROPERTY_EXAMPLES is set, as in
tests/spark/test_properties.py; raise it for a long run.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from cdclake.config import PipelineConfig, parse_config
from cdclake.config_settings import SECTIONS, SETTINGS, top_keys
from cdclake.errors import ConfigError
from property_settings import property_settings

FUZZ = property_settings(300, [HealthCheck.too_slow])
SOURCE = "fuzz.yaml"

# Every key the reader knows (its declarations), so the shapes reach deep into each section; then table names
# and columns of VALID.
KEYS = [*sorted(top_keys()), *sorted({s.key for s in SETTINGS} - top_keys()), "s.t", "s.u", "id", "ts"]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["csv", "parquet", "int", "decimal(10,2)", "decimal(99,1)", "string", "1e400", "-0", ".nan"]),
    st.sampled_from(["SELECT id FROM cdclake.t", "SELECT count(*) AS n FROM cdclake.t GROUP BY 1", "SELEC"]),
    st.sampled_from(KEYS),
    st.text(max_size=12),
)
SHAPES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6), st.integers(0, 3)), inner, max_size=5),
    ),
    max_leaves=25,
)
DOCUMENTS = st.dictionaries(st.sampled_from([*sorted(top_keys()), "other"]), SHAPES, max_size=6)


# A valid configuration touching every section; the mutation strategy below breaks it in a few places.
VALID: dict = {
    "bronze": {"path": "bronze", "format": "csv", "csv_header": False, "csv_delimiter": ",", "csv_null_value": "",
               "csv_no_sup_value": "~", "include_op_for_full_load": True, "timestamp_column": "ts",
               "change_sequence_column": "seq", "transaction_path": "tx", "split_csv_files_above_mb": 0.5,
               "look_back_minutes": 30,
               "s3": {"retry_mode": "adaptive", "max_attempts": 3, "connect_timeout_seconds": 1.5,
                      "read_timeout_seconds": 20, "body_attempts": 2}},
    "silver": {"database": "lake", "cut_tag_days": 3},
    "cdc": {"max_files_per_batch": 10, "max_batch_mb": 64, "parallel_tables": 2},
    "quarantine": {"max_bad_row_ratio": 0.5},
    "source_tables": {"include": ["s.*"], "exclude": "s.tmp_*"},
    "tables": {
        "s.t": {"target": "t_silver", "primary_key": ["id"],
                "columns": {"id": "int", "name": "string", "v": "decimal(9,2)"},
                "clean": {"cast": {"name": "string"}, "derive": {"upper_name": "upper(name)"},
                          "rename": {"name": "full_name"}, "drop": ["upper_name"], "round": ["v"]},
                "history": True, "layout": "bucket", "silent_after_minutes": 0},
        "s.u": {"append_only": True, "columns": {"id": "bigint", "v": "decimal(10,2)"}},
    },
    "gold": {"database": "lake_gold", "full_refresh_share": 0.5, "full_refresh_below_mb": 8},
    "marts": [{"name": "m", "sql": "SELECT id, count(*) AS n FROM lake.t_silver GROUP BY id", "keys": ["id"],
               "partition_by": ["id"], "consistent": False}],
}  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn) -> dict:
    """VALID with 1-3 places replaced by any shape, removed, or given an unknown sibling key."""
    import copy

    document = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        node: Any = document
        while True:  # walk down to a random container, then act on one of its entries
            entries = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
            if not entries:
                break
            key, child = draw(st.sampled_from(entries))
            if isinstance(child, dict | list) and child and draw(st.booleans()):
                node = child
                continue
            action = draw(st.sampled_from(["replace", "remove", "add"]))
            if action == "replace":
                node[key] = draw(SHAPES)
            elif action == "remove" and isinstance(node, dict):
                del node[key]
            elif isinstance(node, dict):
                node[draw(st.sampled_from(KEYS))] = draw(SHAPES)
            break
    return document


def check(text: str) -> None:
    """The property: a configuration, or a ConfigError that names the file and a line."""
    try:
        config = parse_config(text, SOURCE)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(SOURCE), message
        assert re.search(r"line \d+", message) or message == f"{SOURCE} is empty: it needs at least a 'tables' section."
        assert "Traceback" not in message, message
        return
    assert isinstance(config, PipelineConfig) and config.tables


@FUZZ
@given(document=DOCUMENTS)
def test_any_yaml_shape_is_a_config_or_a_config_error_with_a_line(document: dict) -> None:
    # GIVEN any shape of mappings, lists and scalars under the known keys / WHEN it is parsed
    # THEN it is a configuration or a ConfigError naming a line
    check(yaml.safe_dump(document, allow_unicode=True))


@FUZZ
@given(document=mutated())
def test_a_valid_config_broken_in_places_is_a_config_or_a_config_error_with_a_line(document: dict) -> None:
    # GIVEN a valid configuration with a few values replaced by any shape, removed or added
    # WHEN it is parsed / THEN it is a configuration or a ConfigError naming a line
    check(yaml.safe_dump(document, allow_unicode=True))


def test_the_valid_config_sets_every_declared_key() -> None:
    # GIVEN the declared keys / WHEN VALID's keys are listed by section / THEN each is set there, so mutations reach it
    sections = {
        "bronze": VALID["bronze"], "bronze.s3": VALID["bronze"]["s3"], "silver": VALID["silver"], "cdc": VALID["cdc"],
        "quarantine": VALID["quarantine"], "gold": VALID["gold"], "source_tables": VALID["source_tables"],
        "table": {**VALID["tables"]["s.t"], **VALID["tables"]["s.u"]}, "table.clean": VALID["tables"]["s.t"]["clean"],
        "mart": VALID["marts"][0],
    }  # fmt: skip
    assert set(sections) == set(SECTIONS)
    unset = [s.path for s in SETTINGS if s.key not in sections[s.section]]
    assert unset == []


def test_the_valid_config_parses() -> None:
    # GIVEN / WHEN the unmutated configuration is parsed / THEN it is valid (so mutations start from a config)
    config = parse_config(yaml.safe_dump(VALID), SOURCE)
    assert ([t.target for t in config.tables], [m.name for m in config.gold.marts]) == (["t_silver", "u"], ["m"])


@FUZZ
@given(text=st.text(max_size=200))
def test_any_text_is_a_config_or_a_config_error_with_a_line(text: str) -> None:
    # GIVEN any text (control characters, tabs, stray quotes) / WHEN parsed / THEN the same property
    check(text)


YAML_PIECES = st.sampled_from(
    [
        "tables:", "  s.t:", "    primary_key: [id]", "    columns: {id: int}", "bronze:", "  csv_header: true",
        "  csv_delimiter: '\\t'", "&a", "*a", "!!binary", "!!python/object:os.system", "? [a, b]", ": x", "- ",
        "---", "...", "%YAML 1.1", "<<: *a", "'", '"', "{", "[", "\t", "  ", "#", "~", "null", "", "\u00e9",
    ]
)  # fmt: skip


@FUZZ
@given(lines=st.lists(st.tuples(st.integers(0, 3), YAML_PIECES, YAML_PIECES), max_size=10))
def test_yaml_syntax_pieces_are_a_config_or_a_config_error_with_a_line(lines: list[tuple[int, str, str]]) -> None:
    # GIVEN lines glued from YAML syntax (anchors, aliases, tags, merge keys, several documents)
    text = "\n".join("  " * indent + a + " " + b for indent, a, b in lines)
    # WHEN parsed / THEN the same property
    check(text)


def test_a_deeply_nested_document_is_a_config_error() -> None:
    # GIVEN a document nested far deeper than any configuration
    text = "tables: " + "[" * 5000 + "]" * 5000
    # WHEN / THEN a ConfigError with a line, not a RecursionError
    check(text)


def test_an_alias_cycle_is_a_config_error() -> None:
    # GIVEN a table whose settings refer to themselves through an anchor
    text = "tables:\n  s.t: &a\n    clean: *a\n"
    # WHEN / THEN a ConfigError with a line
    check(text)

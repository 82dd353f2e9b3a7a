"""docs/reference.md against the parsers (shells/cli.build_parser): every command and each of its
options is in the commands table, every global option in the paragraph on them, and nothing is
documented that the parser does not take. Also the help every command and action shows."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from cdclake.shells.cli import build_parser
from cdclake.shells.settings import global_options_parent

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
_OPTION = re.compile(r"--[a-z][a-z-]*")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    """Each option of ``parser`` and of its actions (``quarantine list``), as its long names."""
    own = [
        tuple(s for s in a.option_strings if s.startswith("--"))
        for a in parser._actions
        if a.option_strings and "--help" not in a.option_strings
    ]
    return own + [names for sub in _subparsers(parser).values() for names in _options(sub)]


GLOBAL = {name for names in _options(global_options_parent()) for name in names}
COMMANDS = _subparsers(build_parser())


def _documented() -> dict[str, str]:
    """Command name -> the first cell of its row in the commands table (its synopsis)."""
    rows: dict[str, str] = {}
    section = REFERENCE.read_text("utf-8").split("## Commands", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        if match := re.match(r"\| (`(\w[\w-]*)[^|]*?(?:\\\|[^|]*?)*) \| ", line):
            rows[match[2]] = match[1]
    return rows


def _global_paragraph() -> str:
    text = REFERENCE.read_text("utf-8")
    return text[text.index("Global options, before or after") :].split("\n\n", 1)[0]


def test_every_command_of_the_parser_has_a_row_and_every_row_a_command() -> None:
    assert sorted(_documented()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_commands_row_names_its_options_and_no_other(command: str) -> None:
    # GIVEN the command's options in its parser (the global ones aside) and its row in reference.md
    synopsis = _documented()[command]
    options = [names for names in _options(COMMANDS[command]) if not set(names) & GLOBAL]
    named = set(_OPTION.findall(synopsis))
    # THEN each option is named (one of its names), and each name is an option of the command
    assert [names for names in options if not set(names) & named] == [], synopsis
    taken = {name for names in options for name in names} | GLOBAL
    assert sorted(named - taken) == [], synopsis


def test_the_global_options_paragraph_names_every_global_option_and_no_other() -> None:
    paragraph = _global_paragraph()
    assert sorted(GLOBAL - set(_OPTION.findall(paragraph))) == []
    assert sorted(set(_OPTION.findall(paragraph)) - GLOBAL - {"--help"}) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_and_action_says_what_it_does_in_its_help(command: str) -> None:
    parsers = {command: COMMANDS[command]} | {f"{command} {a}": p for a, p in _subparsers(COMMANDS[command]).items()}
    for name, parser in parsers.items():
        assert parser.description, f"`cdclake {name} --help` says nothing about what it does"


def test_every_format_option_takes_one_vocabulary_and_the_old_verify_name() -> None:
    # GIVEN every command (and action) with a --format option
    parser = build_parser()
    formats = {}
    for name, sub in COMMANDS.items():
        for owner, p in ({name: sub} | {f"{name} {a}": s for a, s in _subparsers(sub).items()}).items():
            for action in p._actions:
                if "--format" in action.option_strings:
                    formats[owner] = tuple(action.choices or ())
    # THEN all take table, csv and json; verify's old `text` is still read, as `table`
    assert formats == dict.fromkeys(["quarantine list", "query", "status", "verify"], ("table", "csv", "json"))
    assert parser.parse_args(["verify", "--format", "text"]).format == "table"
    with pytest.raises(SystemExit):
        parser.parse_args(["status", "--format", "yaml"])

"""The ``cdclake`` command line (``shells/cli.py``, ``shells/settings.py``, ``shells/commands/``):
every command in the parser runs something, its --help works, the command line becomes one frozen
``CliSettings``, the progress pace has one default, writing commands hold the warehouse and a
user mistake is one sentence and an exit code. No Spark: commands that would open one fail first."""

from __future__ import annotations

import argparse
import inspect
import subprocess
import sys
import time
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from cdclake.context import LOG_PROGRESS_SECONDS, Engine, open_engine
from cdclake.errors import CdclakeError, ConcurrentWriterError
from cdclake.shells import cli
from cdclake.shells.lock import warehouse_lock
from cdclake.shells.settings import BAR_PROGRESS_SECONDS, CliSettings, cli_settings

# In the order of ``cdclake --help``.
NAMES = (
    "demo",
    "run",
    "full-load",
    "apply",
    "replay",
    "quarantine",
    "maintain",
    "status",
    "capture",
    "verify",
    "init",
    "gold",
    "query",
)
# Each command with the arguments it needs to parse: (argv after the command's name).
ARGUMENTS = {"quarantine": ["list"], "query": ["SELECT 1"]}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _settings(*argv: str, progress_bar: bool = False) -> CliSettings:
    return cli_settings(cli.build_parser().parse_args(argv), started=12.5, progress_bar=progress_bar)


def test_every_command_in_the_parser_has_its_work_and_no_other() -> None:
    # GIVEN the parser built from the command modules
    parser = cli.build_parser()
    # THEN it offers exactly the commands of the table, in the order of --help, each with a name of its own
    assert tuple(_subcommands(parser)) == NAMES
    assert tuple(cli.COMMANDS) == NAMES
    assert [c.name for c in cli.COMMANDS.values()] == list(NAMES)
    assert all(callable(c.run) and callable(c.configure) for c in cli.COMMANDS.values())


@pytest.mark.parametrize(
    "argv", [[name] for name in NAMES] + [["quarantine", "list"], ["quarantine", "dismiss"]], ids=" ".join
)
def test_the_help_of_every_command_works(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # WHEN a command's --help is asked for
    with pytest.raises(SystemExit) as ended:
        cli.build_parser().parse_args([*argv, "--help"])
    # THEN it exits 0 with its usage, its description and the global options
    out = capsys.readouterr().out
    assert ended.value.code == 0
    assert out.startswith(f"usage: cdclake {' '.join(argv)} ")
    if len(argv) == 1:
        assert cli.COMMANDS[argv[0]].description.split(":")[0] in " ".join(out.split())
    assert "global options (also accepted before the command):" in out
    # AND only the global options the command has a use for: init and capture start no Spark, the
    # demo has its own configuration, bronze and warehouse
    skipped = cli.COMMANDS[argv[0]].skip_globals
    assert ("--lock-wait LOCK_WAIT" in out) == ("lock_wait" not in skipped)
    assert ("--warehouse WAREHOUSE" in out) == (argv[0] not in ("init", "capture", "demo"))
    assert ("--config CONFIG" in out) == (argv[0] != "demo")
    assert "-q, --quiet" in out


def test_the_command_line_becomes_one_frozen_settings_value(tmp_path: Path) -> None:
    # GIVEN a command line with global options before and after the command's name
    config = tmp_path / "project" / "cdclake.yaml"
    parsed = cli.build_parser().parse_args(
        ["--iceberg-packages", " a:b:1 , ,c:d:2", "run", "--config", str(config), "--follow", "--table", "s.t"]
    )
    given = dict(vars(parsed))
    # WHEN it is read into settings
    settings = cli_settings(parsed, started=12.5, progress_bar=False)
    # THEN the global options are typed fields, the warehouse resolved next to the configuration
    assert (settings.command, settings.config, settings.started) == ("run", config, 12.5)
    assert settings.warehouse == tmp_path / "project" / ".cdclake" / "warehouse"
    assert settings.iceberg_packages == ("a:b:1", "c:d:2")
    assert (settings.lock_wait, settings.driver_memory, settings.quiet, settings.bronze) == (600.0, "2g", False, None)
    # AND the command's own options are there, the global ones not twice
    assert (settings.options.follow, settings.options.table, settings.options.poll_interval) == (True, ["s.t"], 5.0)
    with pytest.raises(AttributeError):
        settings.options.config  # noqa: B018
    # AND the namespace was not changed, nor can the settings or options be
    assert vars(parsed) == given
    with pytest.raises(FrozenInstanceError):
        settings.warehouse = tmp_path  # type: ignore[misc]
    with pytest.raises(AttributeError, match="read once"):
        settings.options.follow = False


def test_warehouse_given_wins_and_a_command_without_an_option_reads_none() -> None:
    settings = _settings("--warehouse", "w", "status")
    assert settings.warehouse == Path("w")
    assert settings.options.get("table") is None
    assert settings.options.get("table", ["x"]) == ["x"]


def test_the_progress_pace_has_one_default() -> None:
    # GIVEN the engine's default pace for log lines, THEN the engine, open_engine and the CLI share it
    assert Engine.__dataclass_fields__["progress_seconds"].default == LOG_PROGRESS_SECONDS == 30.0
    assert inspect.signature(open_engine).parameters["progress_seconds"].default == LOG_PROGRESS_SECONDS
    assert _settings("status").progress_seconds == LOG_PROGRESS_SECONDS
    # AND a terminal's bar moves faster
    assert _settings("status", progress_bar=True).progress_seconds == BAR_PROGRESS_SECONDS == 1.0


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (CdclakeError("The table is unknown."), 2, "cdclake: The table is unknown.\n"),
        (ConcurrentWriterError("The warehouse is in use."), 75, "cdclake: The warehouse is in use.\n"),
        (KeyboardInterrupt(), 130, f"cdclake: {cli.INTERRUPTED}\n"),
    ],
)
def test_main_runs_the_named_command_with_its_settings_and_turns_mistakes_into_exit_codes(
    raised: BaseException, code: int, message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a status command that records what it is given, then fails
    seen: list[CliSettings] = []

    def failing(settings: CliSettings) -> int:
        seen.append(settings)
        raise raised

    monkeypatch.setitem(cli.COMMANDS, "status", replace(cli.COMMANDS["status"], run=failing))
    before = time.monotonic()
    # WHEN main runs it THEN the exit code and one line on stderr say what happened
    assert cli.main(["-q", "status", "--wide"]) == code
    assert capsys.readouterr().err == message
    # AND the command had the settings, started when main did, at the log lines' pace (no terminal here)
    [settings] = seen
    assert settings.command == "status" and settings.options.wide is True and settings.quiet is True
    assert before <= settings.started <= time.monotonic()
    assert settings.progress_seconds == LOG_PROGRESS_SECONDS


WRITERS = (["run"], ["full-load"], ["apply"], ["replay"], ["maintain"], ["gold"], ["quarantine", "dismiss"])
READERS = (["status"], ["query", "SELECT 1"], ["verify"], ["quarantine", "list"])


@pytest.mark.parametrize("argv", WRITERS + READERS, ids=" ".join)
def test_writing_commands_wait_for_the_warehouse_and_reading_ones_do_not(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN another command holding the warehouse, and no configuration file (so no engine opens)
    warehouse = tmp_path / "warehouse"
    config = tmp_path / "cdclake.yaml"
    with warehouse_lock(warehouse, "maintain", wait_seconds=0):
        # WHEN a command runs without waiting
        code = cli.main(["-q", "--config", str(config), "--warehouse", str(warehouse), "--lock-wait", "0", *argv])
    err = capsys.readouterr().err
    # THEN a writer is refused, naming the holder; a reader goes on to read the configuration
    if argv in WRITERS:
        assert code == ConcurrentWriterError.exit_code, err
        assert "is in use by `cdclake maintain`" in err
    else:
        assert code == 2, err
        assert err == f"cdclake: The configuration file {config} does not exist.\n"


def test_init_refuses_add_new_with_force_before_connecting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a source nothing listens on WHEN init is given both --add-new and --force
    config = tmp_path / "cdclake.yaml"
    argv = ["-q", "--config", str(config), "init", "--source", "postgresql://u@127.0.0.1:9/shop"]
    code = cli.main([*argv, "--add-new", "--force"])
    # THEN one sentence, exit 2, nothing written
    assert code == 2
    assert capsys.readouterr().err == "cdclake: --add-new keeps the file and --force replaces it: choose one.\n"
    assert not config.exists()


def test_a_command_started_with_sigint_ignored_is_still_stopped_by_it() -> None:
    # GIVEN a process that ignores SIGINT, as a script's background job (`cdclake capture --follow &`) inherits it
    script = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "from cdclake.shells import cli\n"
        "try:\n"
        "    cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    signal.pause() if hasattr(signal, 'pause') else None\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    # WHEN the command line has started and the process gets SIGINT
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20, check=False)
    # THEN it is interrupted (KeyboardInterrupt), as in an interactive shell, instead of ignoring it
    assert done.returncode == 130, done.stderr

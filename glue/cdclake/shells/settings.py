"""What the ``cdclake`` command is given, read once: the options every command takes, parsed into a
frozen :class:`CliSettings` that the commands receive and never change.

Settings are read here (arguments, then environment defaults) and passed down; nothing below the
shells reads the environment.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from cdclake.context import LOG_PROGRESS_SECONDS

DEFAULT_HOME = Path(".cdclake")
DEFAULT_WAREHOUSE = DEFAULT_HOME / "warehouse"
# On a terminal the progress bar moves every second; plain log lines keep the engine's pace.
BAR_PROGRESS_SECONDS = 1.0


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cdclake"


def global_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, defaults: bool, skip: frozenset[str] = frozenset()
) -> None:
    """The options every command takes, before or after its name. On the subcommands they default
    to ``SUPPRESS`` so that one left out there does not overwrite the one given before the command;
    ``skip``: the destinations of those a command has no use for (not listed in its --help)."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    def option(*flags: str, **kwargs: Any) -> None:
        if flags[-1].lstrip("-").replace("-", "_") not in skip:
            parser.add_argument(*flags, **kwargs)

    _place_options(option, default)
    _spark_options(option, default)
    option(
        "--lock-wait",
        type=float,
        default=default(600.0),
        help="seconds a writing command waits for another one on the same warehouse (default: 600)",
    )
    option(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="print only results and warnings (Spark logs errors only, no progress)",
    )


# ``global_options``' two halves: how one option is added (or left out), and its default there.
_Option = Callable[..., None]
_Default = Callable[[object], object]


def _place_options(option: _Option, default: _Default) -> None:
    """Where the command works: its configuration, bronze and the local warehouse."""
    option(
        "--config",
        type=Path,
        default=default(Path("cdclake.yaml")),
        help="table configuration (YAML) (default: cdclake.yaml)",
    )
    option(
        "--bronze", default=default(None), help="bronze root (directory or s3://bucket/prefix); overrides bronze.path"
    )
    option(
        "--warehouse",
        type=Path,
        default=default(None),
        help=f"local Iceberg warehouse directory (default: {DEFAULT_WAREHOUSE} next to the --config file)",
    )


def _spark_options(option: _Option, default: _Default) -> None:
    """The local Spark session: the Iceberg runtime, the jar cache, the driver's memory and JVM."""
    option(
        "--cache-dir",
        type=Path,
        default=default(default_cache()),
        help=f"where the relocated Jackson jar is cached (default: {default_cache()})",
    )
    option(
        "--iceberg-jar",
        type=Path,
        default=default(os.environ.get("CDCLAKE_ICEBERG_JAR") or None),
        help="an official iceberg-spark-runtime jar to use instead of the PyPI one (env CDCLAKE_ICEBERG_JAR)",
    )
    option(
        "--iceberg-packages",
        default=default(os.environ.get("CDCLAKE_ICEBERG_PACKAGES", "")),
        help="Maven coordinates for spark.jars.packages, comma-separated (env CDCLAKE_ICEBERG_PACKAGES)",
    )
    option("--driver-memory", default=default("2g"), help="Spark driver memory for local runs (default: 2g)")
    option(
        "--jvm-options",
        default=default(os.environ.get("CDCLAKE_JVM_OPTIONS", "")),
        help="more options of the local Spark driver's JVM (env CDCLAKE_JVM_OPTIONS), e.g. "
        "'-XX:TieredStopAtLevel=1' for quicker short commands on small tables",
    )


# The destinations of the global options above, and of the subcommand's name: what CliSettings holds.
GLOBAL_DESTINATIONS = frozenset(
    {"command", "config", "bronze", "warehouse", "cache_dir", "iceberg_jar", "iceberg_packages"}
    | {"driver_memory", "jvm_options", "lock_wait", "quiet"}
)


# The global options of the local warehouse and its Spark session: what a command that starts no
# Spark (init, capture) has no use for.
SPARK_OPTIONS = frozenset(
    {"warehouse", "cache_dir", "iceberg_jar", "iceberg_packages", "driver_memory", "jvm_options", "lock_wait"}
)


def global_options_parent(skip: frozenset[str] = frozenset()) -> argparse.ArgumentParser:
    """A parent parser with the global options (no defaults), for a command's parser and its
    actions'; ``skip``: the destinations of those the command has no use for."""
    shared = argparse.ArgumentParser(add_help=False)
    group = shared.add_argument_group("global options (also accepted before the command)")
    global_options(group, defaults=False, skip=skip)
    return shared


class Options:
    """A command's own options as parsed (``--follow`` is ``options.follow``), read-only."""

    __slots__ = ("_values",)
    _values: Mapping[str, Any]

    def __init__(self, values: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no option {name!r}") from None

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"the options are read once and not changed (setting {name!r})")

    def get(self, name: str, default: Any = None) -> Any:
        """The option's value, or ``default`` where the command has no such option."""
        return self._values.get(name, default)

    def __repr__(self) -> str:
        return f"Options({dict(self._values)!r})"


@dataclass(frozen=True)
class CliSettings:
    """One run of the ``cdclake`` command: the global options, when it started and how often it
    reports progress, with the command's own options. Built once by :func:`cli_settings`."""

    command: str  # the command's name: "run", "quarantine", ...
    config: Path  # --config
    bronze: str | None  # --bronze; None: bronze.path of the configuration
    warehouse: Path  # --warehouse, else .cdclake/warehouse next to the configuration file
    cache_dir: Path
    iceberg_jar: Path | None
    iceberg_packages: tuple[str, ...]  # Maven coordinates, each stripped
    driver_memory: str
    jvm_options: str  # more driver JVM options (--jvm-options)
    lock_wait: float  # seconds a writing command waits for another one on the warehouse
    quiet: bool
    started: float  # time.monotonic() when the command started: a run's time line counts from here
    progress_seconds: float  # how often a long Spark action reports how far it is
    options: Options  # the command's own options

    @property
    def home(self) -> Path:
        """``.cdclake`` next to the configuration file: the capture's state, bronze without a file."""
        return self.config.parent / DEFAULT_HOME


def warehouse_of(config: Path, warehouse: Path | None) -> Path:
    """``--warehouse``, else ``.cdclake/warehouse`` next to the configuration file: the same
    warehouse whichever directory the command runs from."""
    return Path(warehouse) if warehouse is not None else config.parent / DEFAULT_WAREHOUSE


def cli_settings(parsed: argparse.Namespace, started: float, progress_bar: bool) -> CliSettings:
    """The parsed command line as settings; ``progress_bar``: progress is drawn as a terminal bar."""
    given = vars(parsed)
    return CliSettings(
        command=parsed.command,
        config=parsed.config,
        bronze=parsed.bronze,
        warehouse=warehouse_of(parsed.config, parsed.warehouse),
        cache_dir=parsed.cache_dir,
        iceberg_jar=parsed.iceberg_jar,
        iceberg_packages=tuple(p.strip() for p in parsed.iceberg_packages.split(",") if p.strip()),
        driver_memory=parsed.driver_memory,
        jvm_options=parsed.jvm_options,
        lock_wait=parsed.lock_wait,
        quiet=parsed.quiet,
        started=started,
        progress_seconds=BAR_PROGRESS_SECONDS if progress_bar else LOG_PROGRESS_SECONDS,
        options=Options({k: v for k, v in given.items() if k not in GLOBAL_DESTINATIONS}),
    )

"""The engine a command runs on, on a laptop: opened from the settings on a local warehouse, stopped
by Ctrl-C, and held by one writing command at a time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake.config import load_config
from cdclake.shells.commands import Command

if TYPE_CHECKING:
    import argparse

    from cdclake.config import PipelineConfig, TableConfig
    from cdclake.context import Engine
    from cdclake.shells.settings import CliSettings, Options

# A command's work on the engine: its exit code.
EngineCommand = Callable[["Engine", "CliSettings"], int]


def open_local_engine(settings: CliSettings, config_path: Path, bronze_override: str | None = None) -> Engine:
    """The engine on ``settings.warehouse`` for the configuration at ``config_path``; bronze is
    ``bronze_override``, else ``--bronze``, else the file's ``bronze.path``."""
    from cdclake.context import open_engine
    from cdclake.runtime.session import LocalCatalog

    config = local_config(settings, config_path, bronze_override)
    catalog = LocalCatalog(
        warehouse=settings.warehouse,
        cache_dir=settings.cache_dir,
        runtime_jar=settings.iceberg_jar,
        maven_packages=settings.iceberg_packages,
        driver_memory=settings.driver_memory,
        jvm_options=settings.jvm_options,
    )
    return open_engine(
        config, catalog, staging_dir=settings.warehouse.parent / "staging", progress_seconds=settings.progress_seconds
    )


def local_config(settings: CliSettings, config_path: Path, bronze_override: str | None = None) -> PipelineConfig:
    """The configuration at ``config_path`` with bronze at ``bronze_override``, else ``--bronze``,
    else the file's ``bronze.path`` (relative to the file; the others to the cwd)."""
    config = load_config(config_path)
    bronze = bronze_override or settings.bronze
    if bronze is None:
        bronze = config.bronze.path
        if not bronze.startswith("s3://"):
            bronze = str((config_path.parent / bronze).resolve())
    return replace(config, bronze=replace(config.bronze, path=bronze))


def on_engine(settings: CliSettings, work: EngineCommand, writes: bool) -> int:
    """Run ``work`` on the engine of ``--config``, Ctrl-C stopping it; a command that ``writes``
    holds the warehouse for its whole run (one writer at a time per local warehouse)."""
    if not writes:
        return work(_interruptible(open_local_engine(settings, settings.config)), settings)
    from cdclake.shells.lock import warehouse_lock

    with warehouse_lock(settings.warehouse, settings.command, settings.lock_wait):
        return work(_interruptible(open_local_engine(settings, settings.config)), settings)


def engine_command(
    name: str, description: str, configure: Callable[[argparse.ArgumentParser], None], writes: bool
) -> Callable[[EngineCommand], Command]:
    """Declare the command ``name`` above its work on the engine: the decorated function becomes
    the ``Command``, whose ``run`` is the work ``on_engine`` (holding the warehouse if it ``writes``)."""

    def command(work: EngineCommand) -> Command:
        return Command(name, description, configure, lambda settings: on_engine(settings, work, writes))

    return command


def selected_tables(engine: Engine, options: Options) -> list[TableConfig] | None:
    """The tables named with --table, or None: every configured table."""
    return [engine.config.table(t) for t in options.table] if options.get("table") else None


def _interruptible(engine: Engine) -> Engine:
    _stop_on_interrupt(engine)
    return engine


def _stop_on_interrupt(engine: Engine) -> None:
    """Make Ctrl-C stop the run: the engine's stop is set first (a cancelled Spark job is then not
    mistaken for bad input), then KeyboardInterrupt reaches the waiting main thread, which cancels
    the running jobs (``engine.parallel``). Replaces PySpark's handler, which cancels them from
    inside whatever py4j call the main thread is in and breaks its gateway connection."""
    import signal

    def interrupted(_signum: int, _frame: object) -> None:
        engine.stopping.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)

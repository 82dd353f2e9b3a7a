"""AWS Glue job: Iceberg table maintenance for every table cdclake writes.

Compaction (data and position-delete files), snapshot expiry, orphan-file removal and old delete
tombstones, for each configured silver table and its tombstones and history, the ledger archive,
the journals and the gold marts (in --gold_database when given, as the gold job). The state machine
starts it between CDC batches, never while a CDC job commits.

Arguments: --config, --bronze, --warehouse; optional --catalog and the maintenance settings
--snapshot_retention_hours, --retain_last_snapshots, --orphan_file_age_hours, --tombstone_retention_days
(absent: the engine's defaults).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from cdclake.errors import ConfigError
from cdclake.ops.maintenance import MaintenanceRun, MaintenanceSettings, maintain
from cdclake.shells.glue_job import build_engine, parse_arguments

log = logging.getLogger("cdclake")

# Optional job arguments, each named like its cdclake.ops.maintenance.MaintenanceSettings field.
SETTING_NAMES = (
    "snapshot_retention_hours",
    "retain_last_snapshots",
    "orphan_file_age_hours",
    "tombstone_retention_days",
)


def parse_settings(argv: Sequence[str]) -> dict[str, int]:
    """The maintenance settings given as job arguments, as MaintenanceSettings keyword arguments.

    Only the ones present: an absent argument keeps the engine's default. Each must be a positive whole
    number; anything else is a ConfigError naming the argument. Glue passes ``--name value`` pairs,
    which argparse reads the same way inside and outside AWS Glue (the common arguments are
    ``cdclake.shells.glue_job.parse_arguments``'s business, so unknown ones are ignored here).
    """
    parser = argparse.ArgumentParser(add_help=False)
    for name in SETTING_NAMES:
        parser.add_argument(f"--{name}")
    given = vars(parser.parse_known_args(list(argv[1:]))[0])
    settings: dict[str, int] = {}
    for name in SETTING_NAMES:
        text = given[name]
        if text is None:
            continue
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise ConfigError(f"--{name} must be a positive whole number, not {text!r}.")
        settings[name] = value
    return settings


def main(argv: Sequence[str]) -> MaintenanceRun:
    args = parse_arguments(argv)
    settings = MaintenanceSettings(**parse_settings(argv))
    log.info("maintenance settings: %s", settings)
    engine = build_engine(args)
    run = maintain(engine, settings)
    for report in run.tables:
        log.info("maintenance: %s", report)
    for upkeep in run.shared:
        log.info("maintenance: %s", upkeep.summary())
    return run


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    main(sys.argv)

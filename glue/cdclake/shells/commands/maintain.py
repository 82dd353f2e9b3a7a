"""``maintain``: compaction, snapshot expiry, orphan removal and tombstone pruning."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cdclake.shells.commands import tables_option
from cdclake.shells.local_engine import engine_command, selected_tables

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.shells.settings import CliSettings


def _configure(parser: argparse.ArgumentParser) -> None:
    tables_option(parser)
    parser.add_argument(
        "--snapshot-retention-hours", type=int, default=168, help="snapshots older are expired (default: %(default)s)"
    )
    parser.add_argument("--retain-last", type=int, default=10, help="snapshots always kept (default: %(default)s)")
    parser.add_argument(
        "--orphan-age-hours",
        type=int,
        default=72,
        help="unreferenced files older are removed (default: %(default)s)",
    )
    parser.add_argument(
        "--tombstone-retention-days",
        type=int,
        default=7,
        help="deleted keys remembered this long against late changes (default: %(default)s)",
    )
    parser.add_argument(
        "--changed-only",
        action="store_true",
        help="skip tables with no commit since their last maintenance (what the Glue maintenance job does)",
    )


@engine_command(
    "maintain",
    "compact, expire snapshots, remove orphans, prune tombstones: silver, its side tables, the ledger, "
    "journals and marts",
    _configure,
    writes=True,
)
def _maintain(engine: Engine, settings: CliSettings) -> int:
    from cdclake.ops.maintenance import MaintenanceSettings, maintain

    options = settings.options
    retention = MaintenanceSettings(
        snapshot_retention_hours=options.snapshot_retention_hours,
        retain_last_snapshots=options.retain_last,
        orphan_file_age_hours=options.orphan_age_hours,
        tombstone_retention_days=options.tombstone_retention_days,
        changed_only=options.changed_only,
    )
    run = maintain(engine, retention, selected_tables(engine, options))
    for done in run.tables:
        print(f"maintain  {done.summary()}")
        for side in done.side_tables:
            print(f"            {side.summary()}")
    for shared in run.shared:
        print(f"maintain  {shared.summary()}")
    return 0


COMMANDS = (_maintain,)

"""AWS Glue job: Iceberg table maintenance for every table cdclake writes.

Compaction (data and position-delete files), snapshot expiry, orphan-file removal and old delete
tombstones, for each configured silver table and its tombstones and history, the ledger archive,
the journals and the gold marts (in --gold_database when given, as the gold job). The state machine
starts it between CDC batches, never while a CDC job commits.

Arguments: --config, --bronze, --warehouse; optional --catalog and the maintenance settings
--snapshot_retention_hours, --retain_last_snapshots, --orphan_file_age_hours, --tombstone_retention_days
(absent: the engine's defaults; each a positive whole number).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from cdclake.ops.maintenance import MaintenanceRun, maintain
from cdclake.shells.glue_job import build_engine, parse_arguments

log = logging.getLogger("cdclake")


def main(argv: Sequence[str]) -> MaintenanceRun:
    args = parse_arguments(argv, "maintain")
    log.info("maintenance settings: %s", args.maintenance)
    engine = build_engine(args)
    run = maintain(engine, args.maintenance)
    for report in run.tables:
        log.info("maintenance: %s", report)
    for upkeep in run.shared:
        log.info("maintenance: %s", upkeep.summary())
    return run


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    main(sys.argv)

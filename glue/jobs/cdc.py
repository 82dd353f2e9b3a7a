"""AWS Glue job: apply one CDC batch. Each table's changes land in one Iceberg commit.

Arguments: --config, --bronze, --warehouse; optional --catalog, --manifest (the batch the state
machine dequeued; without it every pending CDC file in bronze is applied), --replay true (apply
the manifest's files again even if applied or quarantined; without a manifest, the quarantine),
--environment and --metrics_namespace (publish CloudWatch metrics).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from cdclake.dms.manifest import read_manifest
from cdclake.engine.run import apply_cdc_files, replay, run
from cdclake.engine.select import ReplaySelection, files_from_keys
from cdclake.report import RunReport
from cdclake.shells.glue_job import build_engine, log_report, parse_arguments, publish_metrics, read_text


def main(argv: Sequence[str]) -> RunReport:
    args = parse_arguments(argv)
    engine = build_engine(args)
    files = []
    if args.manifest:
        keys = [e.key for e in read_manifest(read_text(args.manifest), args.manifest)]
        files = files_from_keys(engine.store, keys, engine.config.bronze.transaction_path)
    if args.replay:
        report = replay(engine, ReplaySelection(keys=frozenset(f.key for f in files), quarantined=not files))
    elif args.manifest:
        report = apply_cdc_files(engine, files)
    else:
        report = run(engine)
    log_report(report)
    publish_metrics(args, report)
    report.checked()  # after the other tables' outcomes are logged and published
    return report


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    main(sys.argv)

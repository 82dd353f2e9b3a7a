"""AWS Glue job: refresh every gold mart of the configuration from the silver tables it reads.

Each mart is refreshed on its own (one Iceberg commit per mart; a mart with nothing new is a no-op,
decided without a Spark job), independent marts at the same time in the job's one Spark session
(``cdclake.gold.run``), and each gets one log line. A mart that fails (its SQL no longer compiles,
its write failed) keeps its previous content and does not stop the others; once all were tried,
the job fails naming the failed marts, so the state machine's Catch alerts (SNS) and the Glue
job-failure rule fires. The state machine then goes on applying CDC batches: a broken mart never holds up silver.

Arguments: --config, --bronze, --warehouse; optional --catalog, --database (the silver database)
and --gold_database (where the marts live; absent: the configuration's gold.database, by default
the silver database + ``_gold``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from cdclake.gold.refresh import FAILED, MartRefresh, gold_database
from cdclake.gold.run import refresh_marts
from cdclake.shells.glue_job import build_engine, parse_arguments

log = logging.getLogger("cdclake")


class MartsFailed(RuntimeError):
    """One or more marts failed to refresh (the others were refreshed)."""


def mart_line(result: MartRefresh) -> str:
    """One log line per mart: its outcome, path, groups, reason and time."""
    line = f"gold mart={result.mart} outcome={result.outcome}"
    if result.path:
        line += f" path={result.path}"
    if result.groups is not None:
        line += f" groups={result.groups}"
    if result.reason:
        line += f" reason={result.reason}"
    return f"{line} seconds={result.seconds:.1f}"


def check(results: Sequence[MartRefresh]) -> None:
    """Raise ``MartsFailed`` naming every failed mart and its reason (the job run then ends FAILED)."""
    failed = [r for r in results if r.outcome == FAILED]
    if failed:
        reasons = "; ".join(f"{r.mart}: {r.reason}" for r in failed)
        raise MartsFailed(f"{len(failed)} of {len(results)} gold mart(s) failed to refresh: {reasons}")


def main(argv: Sequence[str]) -> list[MartRefresh]:
    args = parse_arguments(argv, "gold")
    engine = build_engine(args)
    if not engine.config.gold.marts:
        log.info("gold: no marts configured (add a 'marts:' section to the configuration)")
        return []
    log.info("gold: refreshing %d mart(s) into %s", len(engine.config.gold.marts), gold_database(engine.config))
    results = refresh_marts(engine)
    for result in results:
        log.info("%s", mart_line(result))
    check(results)
    return results


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    main(sys.argv)

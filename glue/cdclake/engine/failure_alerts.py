"""The follow loop's alerts: once per failure episode of a table (and once when it ends), and once per
file a round quarantined (``engine.follow``)."""

from __future__ import annotations

from cdclake.alerts import Alerts, FailureEpisodes, MemoryEpisodes
from cdclake.errors import first_line
from cdclake.report import RunReport, TableFailure


class FailureAlerts:
    """Alerts once per failure episode of a table (and once when it ends), and once per file a round
    quarantined. The episodes are ``FailureEpisodes``': a durable record makes them span runs."""

    def __init__(self, alerts: Alerts, retry_cap_seconds: float, episodes: FailureEpisodes | None = None) -> None:
        self.alerts = alerts
        self.retry_cap_seconds = retry_cap_seconds
        self.episodes = episodes or MemoryEpisodes()
        self.quarantined: set[str] = set()  # keys alerted as quarantined

    def report(self, report: RunReport, worked_on: set[str]) -> None:
        failed = {f.table: f for f in report.failures}
        # a round that worked the table without a failure ends its episode
        changes = self.episodes.settle({s: first_line(f.error) for s, f in failed.items()}, worked_on)
        for source in sorted(changes.started):
            self.alerts.send(f"{source} is failing", self._failing(failed[source]))
        for source in sorted(changes.ended):
            self.alerts.send(
                f"{source} recovered",
                f"{source}: a round applied it again after its failure episode; its held files are applied in order.",
            )
        for source in dict.fromkeys(t.table for t in report.tables if t.quarantined_files):
            batches = [t for t in report.tables if t.table == source and t.quarantined_files]
            files = [f for t in batches for f in t.quarantined_files if f not in self.quarantined]
            if not files:
                continue
            self.quarantined.update(files)
            advice = RunReport(tables=batches).problems()[0]
            self.alerts.send(
                f"{source}: {len(files)} file(s) quarantined",
                f"{advice}. Files: {', '.join(files)}",
            )

    def _failing(self, failure: TableFailure) -> str:
        return (
            f"{failure.table}: its {failure.kind} failed: {first_line(failure.error)}. "
            f"The loop tries it again after growing pauses (up to {self.retry_cap_seconds:.0f} s) while "
            "every other table goes on; no other alert is sent for it until a round applies it again. "
            "The job's log has the whole error."
        )

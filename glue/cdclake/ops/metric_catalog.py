"""Every CloudWatch metric the stack writes and every alarm it raises, declared once.

The writers take their names and units from here (``ops/metrics.py``, ``verify/log.py``; the work
check's Lambda cannot import cdclake, so ``tests/unit/test_metric_catalog.py`` reads its ``add_metric``
calls). ``template.yaml`` is deployed as written, so it is not made from this module: the same test checks
that its alarms and its dashboard's metric lines equal these declarations, and that docs/runbook.md's alarm
table is ``alarm_table()`` (``scripts/docs_tables.py`` writes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Unit = Literal["Count", "Bytes", "Seconds"]
# Who writes a metric: a run's totals (ops/metrics.py), a verify run (verify/log.py), the work check
# Lambda (functions/work_check/app.py); "table" is a metric only opted-in tables get (per_table).
Writer = Literal["run", "verify", "work_check", "table"]
OURS = "MetricsNamespace"  # the stack's own namespace (a template parameter); dimension Environment

# The dashboard's widgets that plot metrics of ours (their titles in template.yaml's PipelineDashboard).
ROWS_WIDGET = "Rows applied"
FILES_WIDGET = "Files applied and quarantined"
BYTES_WIDGET = "Bytes applied"
LAG_WIDGET = "Freshness lag of the worst table (seconds since its newest applied source commit)"
BACKLOG_WIDGET = "Backlog in bronze (files and bytes not yet applied)"
VERIFY_WIDGET = (
    "Verify runs: silver against the source (tables; rows differing on the right). Which keys: cdclake_verify"
)


@dataclass(frozen=True)
class Metric:
    """A metric of the stack's namespace: its name, unit, writer, what it counts, and where it is plotted."""

    name: str
    unit: Unit
    writer: Writer
    doc: str
    per_table: bool = False  # also written per opted-in table (dimensions Table and Environment)
    widget: str | None = None  # the dashboard widget plotting the Environment total; None: not plotted


FILES_APPLIED = Metric("FilesApplied", "Count", "run", "CDC and LOAD files applied", True, FILES_WIDGET)
BYTES_APPLIED = Metric("BytesApplied", "Bytes", "run", "bytes of the files applied", True, BYTES_WIDGET)
ROWS_INSERTED = Metric("RowsInserted", "Count", "run", "rows inserted into silver", True, ROWS_WIDGET)
ROWS_UPDATED = Metric("RowsUpdated", "Count", "run", "rows updated in silver", True, ROWS_WIDGET)
ROWS_DELETED = Metric("RowsDeleted", "Count", "run", "rows deleted from silver", True, ROWS_WIDGET)
TABLES_FAILED = Metric("TablesFailed", "Count", "run", "tables still failing when the run ended", False, FILES_WIDGET)
FILES_QUARANTINED = Metric("FilesQuarantined", "Count", "run", "whole files held in quarantine", True, FILES_WIDGET)
FRESHNESS_LAG = Metric(
    "FreshnessLagSeconds", "Seconds", "run", "now minus the newest applied source commit", True, LAG_WIDGET
)
BACKLOG_FILES = Metric("BacklogFiles", "Count", "run", "files in bronze not yet applied", False, BACKLOG_WIDGET)
BACKLOG_BYTES = Metric("BacklogBytes", "Bytes", "run", "bytes of those files", False, BACKLOG_WIDGET)
CUT_LAG = Metric("CutLagSeconds", "Seconds", "run", "now minus the consistent cut's source commit", False, LAG_WIDGET)
ROWS_IGNORED_LATE = Metric("RowsIgnoredLate", "Count", "table", "changes older than the stored row", True)
ROWS_QUARANTINED = Metric("RowsQuarantined", "Count", "table", "bad rows set aside", True)
BATCH_SECONDS = Metric("BatchSeconds", "Seconds", "table", "seconds the batch took", True)
TABLES_DIFFERING = Metric(
    "TablesDiffering", "Count", "verify", "tables differing from the source", False, VERIFY_WIDGET
)
ROWS_DIFFERING = Metric("RowsDiffering", "Count", "verify", "rows differing from the source", False, VERIFY_WIDGET)
TABLES_SKIPPED = Metric("TablesSkipped", "Count", "verify", "tables that could not be compared", False, VERIFY_WIDGET)
TABLES_VERIFIED = Metric("TablesVerified", "Count", "verify", "tables compared", False, VERIFY_WIDGET)
TABLES_LAGGING = Metric("TablesLagging", "Count", "verify", "tables silver had not caught up on", False, VERIFY_WIDGET)
QUEUE_VISIBLE = Metric("QueueVisibleMessages", "Count", "work_check", "file events waiting in the queue")
QUEUE_IN_FLIGHT = Metric("QueueInFlightMessages", "Count", "work_check", "file events received, not yet deleted")

# Every Metric above, in the order declared (a new one is a line above, nothing more).
METRICS: tuple[Metric, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Metric))
# A run's totals (dimension Environment only: their number does not grow with the tables), in publishing order.
PIPELINE_METRICS = tuple(m for m in METRICS if m.writer == "run")
TABLE_METRICS = tuple(m for m in METRICS if m.per_table)  # per opted-in table
VERIFY_METRICS = tuple(m for m in METRICS if m.writer == "verify")


@dataclass(frozen=True)
class Alarm:
    """A CloudWatch alarm of template.yaml (its logical id) and its line in docs/runbook.md.

    ``namespace`` is ``OURS`` or an AWS namespace; ``metrics`` the metric it watches (several for a metric-math
    alarm over EventBridge rules); ``threshold`` a number or the template parameter that sets it."""

    name: str
    namespace: str
    metrics: tuple[str, ...]
    statistic: Literal["Sum", "Maximum", "SampleCount"]
    comparison: Literal[">", ">=", "<"]
    threshold: float | str
    means: str
    do: str
    missing: Literal["notBreaching", "breaching"] = "notBreaching"


ALARMS = (
    Alarm(
        "ExecutionFailedAlarm",
        "AWS/States",
        ("ExecutionsFailed",),
        "Sum",
        ">=",
        1,
        (
            "the state machine's execution failed outside a CDC run (a failed CDC run alerts and the loop "
            "goes on): nothing applies CDC files until it runs again"
        ),
        (
            'read the alert "the pipeline stopped" (or the execution\'s last failed state in the console), '
            "repair, then start it with `--input '{\"fullLoadDone\": true}'`"
        ),
    ),
    Alarm(
        "ExecutionTimedOutAlarm",
        "AWS/States",
        ("ExecutionsTimedOut",),
        "Sum",
        ">=",
        1,
        (
            "an execution hit Step Functions' own time limit, which the hand-over is there to avoid (a state "
            "that waited far longer than it should)"
        ),
        (
            'look at the execution\'s last states; start the state machine again with `{"fullLoadDone": '
            "true}` and check `PollSeconds` and the job timeouts"
        ),
    ),
    Alarm(
        "DeadLetterAlarm",
        "AWS/SQS",
        ("ApproximateNumberOfMessagesVisible",),
        "Maximum",
        ">=",
        1,
        ("file-queue messages reached the file dead-letter queue: CDC runs received them without applying their files"),
        (
            "find the failing run in the CDC job's log; once it succeeds, [redrive the dead-letter "
            "queue](#redrive-the-dead-letter-queue) (every run lists bronze, so the files are applied anyway)"
        ),
    ),
    Alarm(
        "NewFileEventDeadLetterAlarm",
        "AWS/SQS",
        ("ApproximateNumberOfMessagesVisible",),
        "Maximum",
        ">=",
        1,
        (
            "EventBridge could not queue a new bronze file for a day: the event is in the new-file-events "
            "dead-letter queue"
        ),
        (
            "check the file queue's policy and `QueueKey`'s key policy, then queue the files again by "
            "copying them onto themselves ([Replay files from bronze](#replay-files-from-bronze)); a sweep "
            "run applies them meanwhile"
        ),
    ),
    Alarm(
        "NewFileRuleDeliveryAlarm",
        "AWS/Events",
        ("FailedInvocations", "InvocationsSentToDlq", "InvocationsFailedToBeSentToDlq"),
        "Sum",
        ">=",
        1,
        "the new-file rule failed to deliver events to the file queue (`FailedInvocations`, dead-letter sends)",
        "the same checks as above; `make verify-deploy` proves the path again after a fix",
    ),
    Alarm(
        "GlueJobFailedRuleDeliveryAlarm",
        "AWS/Events",
        ("FailedInvocations", "InvocationsFailedToBeSentToDlq"),
        "Sum",
        ">=",
        1,
        "the Glue-failure rule could not publish to the alert topic: job failures are not being e-mailed",
        (
            "check `AlertTopicPolicy` (its `GlueJobFailures` statement) and `AlertKey`'s "
            "`EventBridgePublishes`; look at the Glue job runs in the console meanwhile"
        ),
    ),
    Alarm(
        "ReplicationTaskStoppedRuleDeliveryAlarm",
        "AWS/Events",
        ("FailedInvocations", "InvocationsFailedToBeSentToDlq"),
        "Sum",
        ">=",
        1,
        (
            "the DMS task rule could not publish a task stop or failure to the alert topic: a stopped DMS "
            "task would pass in silence"
        ),
        (
            "check `AlertTopicPolicy` (its `ReplicationTaskStops` statement) and `AlertKey`; `aws dms "
            "describe-replication-tasks` shows the tasks' status meanwhile"
        ),
    ),
    Alarm(
        "CutStalledAlarm",
        OURS,
        ("CutLagSeconds",),
        "Maximum",
        ">",
        "FreshnessLagAlarmSeconds",
        (
            "the database's consistent cut (docs/cuts.md) is older than `FreshnessLagAlarmSeconds`: a table is "
            "not at the newest position (failed, held in quarantine, its load pending, held by capture), so "
            "readers of `cdclake_cut` see ever older data; no data when bronze proves no cut"
        ),
        (
            "the CDC job's log says why on each round (`no new cut: <table>: <why>`); fix that table, or read "
            "the tables' latest snapshots until it is mended"
        ),
    ),
    Alarm(
        "FreshnessLagAlarm",
        OURS,
        ("FreshnessLagSeconds",),
        "Maximum",
        ">",
        "FreshnessLagAlarmSeconds",
        (
            "the worst table's freshness lag (now minus its newest applied source commit) is above "
            "`FreshnessLagAlarmSeconds`"
        ),
        (
            "the dashboard's per-table widget names the table; a quiet source also lags (the lag counts from "
            "the last source commit): check the DMS task before the pipeline; a backlog (`BacklogFiles`) "
            "means the CDC job is too slow (more `CdcWorkers`)"
        ),
    ),
    Alarm(
        "FreshnessMissingAlarm",
        OURS,
        ("FreshnessLagSeconds",),
        "SampleCount",
        "<",
        1,
        (
            "no CDC batch reported a lag for `FreshnessMissingAlarmMinutes` (missing data breaches): DMS "
            "stopped writing files, or the pipeline stopped applying them"
        ),
        (
            "`aws dms describe-replication-tasks` (a stopped or failed task also alerted through the DMS "
            "task rule), then the queue and the state machine. **False alarms**: a DMS task paused on "
            "purpose (maintenance, a source migration), and a source with no change for that long. Before "
            "pausing DMS, `aws cloudwatch disable-alarm-actions --alarm-names <its name>`; after resuming, "
            "`enable-alarm-actions`. For a source that is often quiet for hours, raise "
            "`FreshnessMissingAlarmMinutes` or have the source update a small heartbeat table that the DMS "
            "task replicates"
        ),
        "breaching",
    ),
    Alarm(
        "OldestQueuedFileAlarm",
        "AWS/SQS",
        ("ApproximateAgeOfOldestMessage",),
        "Maximum",
        ">",
        "FreshnessLagAlarmSeconds",
        (
            "a file's event has waited in the queue longer than `FreshnessLagAlarmSeconds`: the pipeline is "
            "stopped, paused, stuck or too slow"
        ),
        (
            "is an execution running (`aws stepfunctions list-executions --status-filter RUNNING`)? If not, "
            "start it; if a CDC run is active for long, read its log"
        ),
    ),
    Alarm(
        "TablesFailedAlarm",
        OURS,
        ("TablesFailed",),
        "Sum",
        ">",
        0,
        "a CDC or full-load run ended with tables still failing; the other tables were applied",
        (
            'the job\'s log has one `"cdclake": "table_failure"` line per table with the error; see [Messages '
            "and what to do](#messages-and-what-to-do)"
        ),
    ),
    Alarm(
        "FilesQuarantinedAlarm",
        OURS,
        ("FilesQuarantined",),
        "Sum",
        ">",
        0,
        "whole CDC files were quarantined: that table's changes wait until the cause is fixed",
        "[Inspect the quarantine](#inspect-the-quarantine), fix the cause, replay",
    ),
    Alarm(
        "VerifyDifferingAlarm",
        OURS,
        ("TablesDiffering",),
        "Maximum",
        ">",
        0,
        (
            "a verify run (after the full load, or `VerifySchedule`) found silver tables that differ from "
            "the source (`TablesDiffering` > 0); the run itself succeeded"
        ),
        (
            "query `cdclake_verify` for the run's `differing` rows and their `sample_keys`, then act on each "
            "kind as in [Verify on AWS](#verify-on-aws); each was read again once silver had caught up with "
            "the source, so it is not lag"
        ),
    ),
    Alarm(
        "VerifySkippedAlarm",
        OURS,
        ("TablesSkipped",),
        "Maximum",
        ">",
        0,
        (
            "a verify run could not compare some tables (`TablesSkipped` > 0): the source unreachable or "
            "refusing the secret's login, a table missing on one side"
        ),
        (
            "the `problem` column of the run's `skipped` rows says why (`Cannot connect ...`: the secret, "
            "the Glue connection's network, the security group; `no silver table`: not loaded yet)"
        ),
    ),
)


def alarm_table() -> str:
    """docs/runbook.md's table of alarms (between its ``alarms`` markers): what each means, what to do."""
    lines = ["| alarm | what it means | what to do |", "|---|---|---|"]
    lines += [f"| `{a.name}` | {a.means} | {a.do} |" for a in ALARMS]
    return "\n".join(lines)

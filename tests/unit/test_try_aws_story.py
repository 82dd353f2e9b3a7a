"""`make try-aws` prints its story (steps, executions, the whole silver table, the verdict) and sends the rest
(emulator warnings, metric JSON lines, the JVM's output) to a log file (scripts/try_aws_story.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from try_aws_story import executions_text, silver_text, verdict  # noqa: E402


def test_the_whole_silver_table_is_shown() -> None:
    # GIVEN 23 silver rows (Spark's show() printed 20 and "only showing top 20 rows")
    rows = [{"id": i, "name": f"host {i}", "city": None if i == 7 else "Lisbon"} for i in range(1, 24)]
    # WHEN the story shows the table
    text = silver_text("silver.db.hosts_silver", rows)
    # THEN every row is there, in order, NULL spelled out, with the count and no truncation note
    lines = text.splitlines()
    assert lines[0] == "silver table silver.db.hosts_silver:"
    assert [line.split("|")[1].strip() for line in lines if line.startswith("| ") and "id" not in line[:5]] == [
        str(i) for i in range(1, 24)
    ]
    assert "| 7  | host 7  | NULL   |" in text
    assert lines[-1] == "(23 rows)" and "only showing" not in text


def test_executions_and_the_verdict_read_as_the_story() -> None:
    # GIVEN two executions and their paths
    text = executions_text([("try-aws", "SUCCEEDED", ["Wait", "FullLoad"]), ("g1-x", "RUNNING", ["Poll"])])
    # THEN one line each; the verdict says equal (0) or what differs (1), differences before alerts
    assert text == "executions:\n  try-aws (SUCCEEDED): Wait > FullLoad\n  g1-x (RUNNING): Poll\n"
    assert verdict([], []) == ("try-aws: silver equals the source's final state; no alert was sent.\n", 0)
    assert verdict(["id 3: name x != y"], ["alarm"]) == (
        "try-aws: silver differs from the source:\n  id 3: name x != y\n",
        1,
    )
    assert verdict([], ["table held"]) == ("try-aws: alerts were sent:\n  table held\n", 1)


def test_what_is_not_the_story_goes_to_the_log(tmp_path: Path) -> None:
    # GIVEN a process that prints through Python, writes to file descriptors 1 and 2 directly (as the
    # JVM and the emulator's threads do) and tells its story in between
    log = tmp_path / "logs" / "try-aws.log"
    program = (
        "import os, sys, warnings\n"
        f"sys.path.insert(0, {str(ROOT / 'scripts')!r})\n"
        "from try_aws_story import told_apart\n"
        "print('before')\n"
        f"with told_apart(__import__('pathlib').Path({str(log)!r})) as story:\n"
        '    print(\'{"_aws": {"CloudWatchMetrics": []}}\')\n'
        "    story.say('try-aws: step one')\n"
        "    os.write(1, b'jvm stdout\\n')\n"
        "    os.write(2, b'jvm stderr\\n')\n"
        "    warnings.warn('moto could not parse')\n"
        "    story.say('try-aws: verdict')\n"
        "print('after')\n"
    )
    # WHEN it runs
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    # THEN the terminal shows the story alone (and what was printed outside the block)
    assert done.stdout == "before\ntry-aws: step one\ntry-aws: verdict\nafter\n"
    assert done.stderr == ""
    # AND the log holds everything else
    logged = log.read_text(encoding="utf-8")
    for line in ('{"_aws": {"CloudWatchMetrics": []}}', "jvm stdout", "jvm stderr", "moto could not parse"):
        assert line in logged
    assert "try-aws:" not in logged

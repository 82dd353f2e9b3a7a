"""The ``cdclake`` command as a user runs it (a subprocess each, so each starts its own Spark)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from cdclake.dms.writer import write_csv

CONFIG = """
bronze: {path: bronze, timestamp_column: ts}
silver: {database: shop}
tables:
  s.items: {primary_key: [id], columns: {id: int, name: string}}
"""


def _cdclake(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cdclake.shells.cli", "--config", str(tmp_path / "cdclake.yaml")]
    command += ["--warehouse", str(tmp_path / "warehouse"), "-q", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_missing_config_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    # GIVEN no configuration file WHEN any command runs
    result = _cdclake(tmp_path, "run")
    # THEN one clear sentence, no traceback, exit code 2
    assert result.returncode == 2
    assert result.stderr.strip() == f"cdclake: The configuration file {tmp_path / 'cdclake.yaml'} does not exist."


def test_run_status_query_and_user_mistakes(tmp_path: Path) -> None:
    # GIVEN a configuration and bronze files next to it
    (tmp_path / "cdclake.yaml").write_text(CONFIG)
    write_csv(tmp_path / "bronze" / "s" / "items" / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "a,b"]])
    write_csv(
        tmp_path / "bronze" / "s" / "items" / "20240102-0000010000.csv",
        [["I", "2024-01-02 00:00:01.000000", "2", "c"]],
    )
    # WHEN the user runs, asks for status and queries as JSON
    ran = _cdclake(tmp_path, "run")
    status = _cdclake(tmp_path, "status", "--format", "json")
    query = _cdclake(tmp_path, "query", "SELECT id, name FROM shop.items ORDER BY id", "--format", "json")
    unknown = _cdclake(tmp_path, "run", "--table", "nope")
    bad_sql = _cdclake(tmp_path, "query", "SELECT FROM WHERE")
    # THEN each prints what it should
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == ""  # a quiet run prints cdclake's results only: no Spark start-up lines
    # AND the run ends with where its time went, the Spark start-up first (seconds, not zero)
    times = re.fullmatch(
        r"time: start-up (\d+\.\d) s, full loads \d+\.\d s \(1 table\), CDC \d+\.\d s \(1 table\)"
        r"(, other \d+\.\d s)?; total (\d+\.\d) s",
        ran.stdout.splitlines()[-1],
    )
    assert times and 0 < float(times[1]) < float(times[3]), ran.stdout
    assert (
        "cdc       s.items: files=1 skipped=0 inserted=1 updated=0 deleted=0 ignored_late=0 rows_quarantined=0"
        in ran.stdout
    )
    table_status = json.loads(status.stdout)
    assert (table_status["rows"], table_status["files_applied"]) == (2, 2)
    assert table_status["last_applied_file"] == "s/items/20240102-0000010000.csv"
    assert table_status["latest_change"] == "2024-01-02 00:00:01.000000"
    assert [json.loads(line) for line in query.stdout.splitlines()] == [
        {"id": 1, "name": "a,b"},
        {"id": 2, "name": "c"},
    ]
    assert unknown.returncode == 2
    assert "Table 'nope' is not in the configuration (known: s.items)." in unknown.stderr
    assert "Traceback" not in unknown.stderr
    assert bad_sql.returncode == 2
    # Spark itself may log warnings while it starts; our message is the last line
    assert bad_sql.stderr.strip().splitlines()[-1].startswith("cdclake: The query failed: [UNRESOLVED_COLUMN")


def test_two_runs_at_once_both_finish_and_silver_is_right(tmp_path: Path) -> None:
    # GIVEN a configuration, a full load and CDC files
    (tmp_path / "cdclake.yaml").write_text(CONFIG)
    table = tmp_path / "bronze" / "s" / "items"
    write_csv(table / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", str(i), f"v{i}"] for i in range(5)])
    for n in range(1, 4):
        write_csv(table / f"20240102-00000{n}0000.csv", [["U", f"2024-01-02 00:00:0{n}.000000", str(n), f"u{n}"]])
    # WHEN a manual run starts beside another one, and a third will not wait
    command = [sys.executable, "-m", "cdclake.shells.cli", "--config", str(tmp_path / "cdclake.yaml")]
    command += ["--warehouse", str(tmp_path / "warehouse"), "-q", "run"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    lock = tmp_path / "warehouse" / ".cdclake.lock"
    for _ in range(600):  # until the first run holds the warehouse
        if lock.exists() and lock.read_text().strip():
            break
        time.sleep(0.1)
    impatient = _cdclake(tmp_path, "--lock-wait", "0", "run")
    second = _cdclake(tmp_path, "run")
    _, err = first.communicate(timeout=300)
    # THEN both patient runs end well without a stack trace, the impatient one names the holder
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr
    assert "Traceback" not in err + second.stderr + impatient.stderr
    assert impatient.returncode == 75
    assert "is in use by `cdclake run` (pid" in impatient.stderr
    assert "nothing to apply" in second.stdout  # the first run applied everything; the second found it done
    query = _cdclake(tmp_path, "query", "SELECT id, name FROM shop.items ORDER BY id", "--format", "csv")
    assert query.stdout.splitlines() == ["id,name", "0,v0", "1,u1", "2,u2", "3,u3", "4,v4"]


def test_options_after_the_command_and_the_warehouse_next_to_the_config(tmp_path: Path) -> None:
    # GIVEN a project folder with its configuration and bronze, and no --warehouse anywhere
    project = tmp_path / "project"
    project.mkdir()
    (project / "cdclake.yaml").write_text(CONFIG)
    write_csv(project / "bronze" / "s" / "items" / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "a"]])

    def cdclake(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cdclake.shells.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)

    # WHEN the user runs from above the project, global options after the command's name,
    # then asks for the status from inside the project, and sends a statement Spark cannot parse
    ran = cdclake(tmp_path, "run", "--config", "project/cdclake.yaml", "-q")
    status = cdclake(project, "status", "-q")
    bad_sql = cdclake(project, "query", "SELEC 1", "-q")
    # THEN both found the one warehouse next to the configuration, not in the current directory
    assert ran.returncode == 0, ran.stderr
    assert (project / ".cdclake" / "warehouse").is_dir()
    assert not (tmp_path / ".cdclake").exists()
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0].split() == ["TABLE", "ROWS", "APPLIED", "PENDING", "LAG", "STATE"]
    assert status.stdout.splitlines()[1].split()[:4] == ["s.items", "1", "1", "0"]
    assert status.stdout.splitlines()[1].endswith("up to date")
    # AND Spark's reason for the bad statement is one sentence, exit 2
    assert bad_sql.returncode == 2
    assert bad_sql.stderr.strip().splitlines()[-1] == (
        "cdclake: The query failed: [PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC' (line 1, position 0)"
    )
    assert "Traceback" not in bad_sql.stderr

"""The Glue jobs' arguments: each job reads its own, once, into one value (cdclake.shells.glue_job),
and the template gives each job exactly the arguments it reads.

The maintenance itself is the engine's (cdclake.ops.maintenance) and is tested with it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import get_args

import pytest
from test_static import template

from cdclake.errors import ConfigError
from cdclake.ops.maintenance import MaintenanceSettings
from cdclake.shells.glue_job import JOB_ARGUMENTS, REQUIRED_ARGUMENTS, JobName, parse_arguments

COMMON = ["--config", "s3://a/config/cdclake.yaml", "--bronze", "s3://b/dms", "--warehouse", "s3://s/warehouse"]
JOBS = {
    "FullLoadJob": "full_load",
    "CdcJob": "cdc",
    "MaintenanceJob": "maintain",
    "GoldJob": "gold",
    "VerifyJob": "verify",
}


def test_absent_settings_keep_the_engine_defaults_and_skip_unchanged_tables() -> None:
    # The job runs on a cadence over every table: a table with no commit since its last maintenance is skipped.
    assert parse_arguments(["maintain.py", *COMMON], "maintain").maintenance == MaintenanceSettings(changed_only=True)


def test_settings_are_read_among_the_arguments_glue_adds() -> None:
    # GIVEN argv as AWS Glue passes it: its own arguments, the common ones, then two of the settings
    argv = ["maintain.py", "--JOB_ID", "j_1", "--job-bookmark-option", "job-bookmark-disable", *COMMON,
            "--retain_last_snapshots", "5", "--tombstone_retention_days", "15", "--JOB_RUN_ID", "jr_1"]  # fmt: skip
    # THEN exactly those two change, as numbers
    settings = parse_arguments(argv, "maintain").maintenance
    assert settings == MaintenanceSettings(retain_last_snapshots=5, tombstone_retention_days=15, changed_only=True)


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "a week"])
def test_a_setting_that_is_not_a_positive_whole_number_is_a_clear_error(value: str) -> None:
    with pytest.raises(ConfigError, match=r"--orphan_file_age_hours must be a positive whole number"):
        parse_arguments(["maintain.py", *COMMON, "--orphan_file_age_hours", value], "maintain")


def test_a_job_reads_only_its_own_arguments() -> None:
    argv = ["job.py", *COMMON, "--retain_last_snapshots", "5", "--poll_seconds", "7", "--reload", "true"]
    assert parse_arguments(argv, "cdc").maintenance == MaintenanceSettings(changed_only=True)  # not the CDC job's
    assert parse_arguments(argv, "cdc").cdc.follow.poll_seconds == 7
    assert parse_arguments(argv, "cdc").full_load.reload is False
    assert parse_arguments(argv, "full_load").full_load.reload is True
    assert parse_arguments(argv, "maintain").cdc.follow.poll_seconds == 10  # the job's default pace, untouched
    with pytest.raises(ConfigError, match="The cdc job needs --warehouse"):
        parse_arguments(["job.py", *COMMON[:4]], "cdc")
    with pytest.raises(ConfigError, match="--idle_seconds must not be negative"):
        parse_arguments(["job.py", *COMMON, "--idle_seconds", "-1"], "cdc")


def test_the_template_gives_each_job_exactly_the_arguments_it_reads() -> None:
    resources = template()["Resources"]
    assert {resources[name]["Properties"]["Command"]["ScriptLocation"]["Sub"].rsplit("/", 1)[1] for name in JOBS} == {
        f"{job}.py" for job in get_args(JobName)
    }
    for name, job in JOBS.items():
        # Glue's own arguments (--conf, --enable-metrics, ...) are AWS Glue's; cdclake's use underscores
        glue = {"conf", "datalake-formats", "additional-python-modules", "python-modules-installer-option",
                "enable-metrics", "enable-observability-metrics", "job-language"}  # fmt: skip
        ours = {a[2:] for a in resources[name]["Properties"]["DefaultArguments"]} - glue
        assert set(REQUIRED_ARGUMENTS) <= ours, name
        assert ours <= set(JOB_ARGUMENTS[job]), (name, ours - set(JOB_ARGUMENTS[job]))


def test_the_maintenance_defaults_of_the_template_are_accepted() -> None:
    arguments = template()["Resources"]["MaintenanceJob"]["Properties"]["DefaultArguments"]
    settings = set(asdict(MaintenanceSettings())) - {"changed_only"}  # the job always skips unchanged tables
    assert {name[2:] for name in arguments} & settings == settings
    parameters = template()["Parameters"]
    defaults = {
        "snapshot_retention_hours": parameters["SnapshotRetentionHours"]["Default"],
        "retain_last_snapshots": parameters["RetainLastSnapshots"]["Default"],
        "orphan_file_age_hours": parameters["OrphanFileAgeHours"]["Default"],
        "tombstone_retention_days": parameters["TombstoneRetentionDays"]["Default"],
    }
    argv = ["maintain.py", *COMMON]
    for name, value in defaults.items():
        argv += [f"--{name}", str(value)]
    assert asdict(parse_arguments(argv, "maintain").maintenance) == {**defaults, "changed_only": True}

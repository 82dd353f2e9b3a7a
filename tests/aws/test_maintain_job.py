"""The maintenance Glue entry point's own logic: reading the maintenance settings from job arguments.

The maintenance itself is the engine's (cdclake.ops.maintenance) and is tested with it.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest
from conftest import ROOT
from test_static import template

from cdclake.errors import ConfigError


def load_entry_point() -> ModuleType:
    spec = importlib.util.spec_from_file_location("glue_job_maintain", ROOT / "glue" / "jobs" / "maintain.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


maintain = load_entry_point()
COMMON = ["--config", "s3://a/config/cdclake.yaml", "--bronze", "s3://b/dms", "--warehouse", "s3://s/warehouse"]


def test_absent_settings_keep_the_engine_defaults() -> None:
    assert maintain.parse_settings(["maintain.py", *COMMON]) == {}


def test_settings_are_read_among_the_arguments_glue_adds() -> None:
    # GIVEN argv as AWS Glue passes it: its own arguments, the common ones, then two of the settings
    argv = ["maintain.py", "--JOB_ID", "j_1", "--job-bookmark-option", "job-bookmark-disable", *COMMON,
            "--retain_last_snapshots", "5", "--tombstone_retention_days", "15", "--JOB_RUN_ID", "jr_1"]  # fmt: skip
    # THEN exactly those two are MaintenanceSettings keyword arguments, as numbers
    assert maintain.parse_settings(argv) == {"retain_last_snapshots": 5, "tombstone_retention_days": 15}


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "a week", ""])
def test_a_setting_that_is_not_a_positive_whole_number_is_a_clear_error(value: str) -> None:
    with pytest.raises(ConfigError, match=r"--orphan_file_age_hours must be a positive whole number"):
        maintain.parse_settings(["maintain.py", *COMMON, "--orphan_file_age_hours", value])


def test_the_template_passes_every_setting_the_entry_point_reads() -> None:
    arguments = template()["Resources"]["MaintenanceJob"]["Properties"]["DefaultArguments"]
    settings = {name[2:] for name in arguments} & set(maintain.SETTING_NAMES)
    assert settings == set(maintain.SETTING_NAMES)
    # ... and their defaults, passed as Glue would, are all accepted
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
    assert maintain.parse_settings(argv) == defaults

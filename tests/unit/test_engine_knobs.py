"""Engine.tuned: each knob lands in its group (BatchSizes, CommitPolicy) or on the engine, and a name that is
none of them is refused."""

from pathlib import Path

import pytest

from cdclake.config import parse_config
from cdclake.context import BatchSizes, CommitPolicy, Engine
from cdclake.dms.store import LocalBronze
from configs import keyed_tables


def test_a_knob_lands_in_its_group_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    engine = Engine(spark=None, config=parse_config(keyed_tables("s.a"), "t.yaml"), store=LocalBronze(tmp_path))  # type: ignore[arg-type]
    tuned = engine.tuned(driver_write_bytes=0, way="merge", attempts=8, progress_seconds=0.0)
    assert tuned.sizes == BatchSizes(driver_write_bytes=0)
    assert tuned.commits == CommitPolicy(way="merge", attempts=8)
    assert tuned.progress_seconds == 0.0 and engine.sizes == BatchSizes() and engine.commits == CommitPolicy()
    with pytest.raises(TypeError, match="driver_bytes"):
        engine.tuned(driver_bytes=0)

"""The request ``verify --cut`` leaves for capture (``dms.cut_request``): read back whole, passed over when it
cannot be read, expired by time, and withdrawn only by the verify that wrote it."""

from __future__ import annotations

from pathlib import Path

from cdclake.dms.cut_request import REQUEST_KEY, CutRequest, read_request, withdraw, write_request
from cdclake.dms.store import LocalBronze


def test_a_request_is_read_back_expires_and_is_withdrawn_only_by_its_writer(tmp_path: Path) -> None:
    store = LocalBronze(tmp_path)
    assert read_request(store) is None
    mine = CutRequest(26374296, "0/19270B8", expires_at=1000.0, requested_by="verify on host, process 1")
    write_request(tmp_path, mine)
    assert read_request(store) == mine
    assert mine.active(now=999.9) and not mine.active(now=1000.0)
    # another verify's request replaced mine: withdrawing mine leaves theirs standing
    theirs = CutRequest(26374400, "0/1927120", expires_at=2000.0)
    write_request(tmp_path, theirs)
    withdraw(tmp_path, mine)
    assert read_request(store) == theirs
    withdraw(tmp_path, theirs)
    assert not (tmp_path / REQUEST_KEY).exists()


def test_a_request_that_cannot_be_read_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / REQUEST_KEY).parent.mkdir(parents=True)
    (tmp_path / REQUEST_KEY).write_text('{"position": "not a number"', "utf-8")
    assert read_request(LocalBronze(tmp_path)) is None

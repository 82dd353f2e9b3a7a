"""The CDC lane's reload request: its JSON form, and written only when the pending tables change."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from cdclake.ops.reload_requests import ReloadRequest, ReloadRequester


def test_a_request_round_trips_through_its_json_form() -> None:
    request = ReloadRequest({"s.b": "a reload: LOAD files written again", "s.a": "not loaded yet: 2 LOAD file(s)"})
    text = request.to_json(datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert json.loads(text) == {
        "tables": ["s.a", "s.b"],
        "reasons": {"s.a": "not loaded yet: 2 LOAD file(s)", "s.b": "a reload: LOAD files written again"},
        "updated": "2024-01-02T03:04:05Z",
    }
    assert ReloadRequest.from_json(text) == request


def test_the_requester_writes_at_its_first_offer_and_then_only_when_the_tables_change() -> None:
    written: list[list[str]] = []
    requester = ReloadRequester(lambda text: written.append(json.loads(text)["tables"]))
    # GIVEN a run whose first round finds nothing pending: the request is cleared once
    assert requester.offer({}) is True
    # WHEN rounds find the same set again, or a table's load becomes due, or is done
    assert requester.offer({}) is False
    assert requester.offer({"s.a": "a reload"}) is True
    assert requester.offer({"s.a": "a reload, said again"}) is False
    assert requester.offer({}) is True
    # THEN exactly the changes were written
    assert written == [[], ["s.a"], []]

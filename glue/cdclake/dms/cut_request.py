"""A request, by ``cdclake verify --cut``, that capture stop at one source position until a cut is published there.

Verify reads the source at one position P: PostgreSQL exports the snapshot of a temporary logical slot, which
shows exactly the transactions that committed before the slot's consistent point. Silver holds a snapshot at P
only if capture ends a flush there and a round publishes the cut at P (``engine.cut``). So verify writes this
request under the bronze root, and capture, at its next poll:

* decodes up to P and no further, writes every buffered table and the progress record at P, then
* holds: reads nothing more while the request stands, so the next round's bound is P and its cut is at P
  (recorded even when it is the previous cut's state, nothing having changed since: ``CutBound.asked``).

Verify removes the request once the cut at P is published (capture goes on), or it expires (``expires_at``:
verify's wait, so a verify that died leaves capture held no longer than it would have waited). A capture that
has already moved past P when it sees the request cannot stop there: it goes on, and verify, seeing the progress
record past P with no cut at P, asks again at a new position (``verify.postgres.at_cut``).

The request is one JSON object at ``REQUEST_KEY``, written atomically; capture's bronze is a local folder.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from cdclake.dms.progress import CDCLAKE_PREFIX
from cdclake.dms.store import BronzeStore, LocalBronze
from cdclake.dms.writer import write_durably
from cdclake.errors import BronzeError

REQUEST_KEY = CDCLAKE_PREFIX + "cut-request.json"


@dataclass(frozen=True)
class CutRequest:
    """Stop at ``position`` (PostgreSQL: an LSN, as a number) and hold there until ``expires_at``."""

    position: int
    position_text: str  # as the source prints it (``0/16B3748``)
    expires_at: float  # seconds since the epoch
    requested_by: str = ""  # for people: which verify asked (host and process)

    def active(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) < self.expires_at

    def to_json(self) -> str:
        return json.dumps(
            {"position": self.position, "position_text": self.position_text, "expires_at": self.expires_at,
             "requested_by": self.requested_by},
            indent=1,
        )  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> CutRequest:
        data = json.loads(text)
        return cls(int(data["position"]), str(data["position_text"]), float(data["expires_at"]),
                   str(data.get("requested_by") or ""))  # fmt: skip


def read_request(store: BronzeStore) -> CutRequest | None:
    """The request standing in ``store`` (None: none, or one that cannot be read, which is passed over)."""
    try:
        if store.size(REQUEST_KEY) is None:
            return None
        return CutRequest.from_json(store.read_head(REQUEST_KEY, 1 << 16).decode("utf-8"))
    except (BronzeError, ValueError, KeyError, TypeError):
        return None  # removed meanwhile, or not a request


def write_request(bronze: Path, request: CutRequest) -> None:
    write_durably(bronze / REQUEST_KEY, request.to_json().encode("utf-8"))


def withdraw(bronze: Path, request: CutRequest) -> None:
    """Remove ``request`` if it is still the one standing (another verify may have written its own since)."""
    if read_request(LocalBronze(bronze)) == request:
        (bronze / REQUEST_KEY).unlink(missing_ok=True)

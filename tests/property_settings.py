"""The Hypothesis settings of every property suite: a small example count for CI, the same examples
every run, unless CDCLAKE_PROPERTY_EXAMPLES asks for a long run (that many, random ones)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from hypothesis import HealthCheck, settings

COUNT = "CDCLAKE_PROPERTY_EXAMPLES"


def property_settings(examples: int, suppress: Sequence[HealthCheck]) -> settings:
    """``examples`` examples (or CDCLAKE_PROPERTY_EXAMPLES of them), derandomized unless that count
    is set, no deadline (Spark jobs take seconds), the ``suppress`` health checks off."""
    return settings(
        max_examples=int(os.environ.get(COUNT, str(examples))),
        deadline=None,
        derandomize=os.environ.get(COUNT) is None,
        suppress_health_check=list(suppress),
    )

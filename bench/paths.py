"""Where the benchmarks work and where the relocated Jackson jar is cached (shared by every bench)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = Path.home() / ".cache" / "cdclake"

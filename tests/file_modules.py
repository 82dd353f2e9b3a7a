"""Import a repository file that is no module of a package (scripts/, functions/*/app.py,
glue/jobs/, a Glue script downloaded in a test) from its path, as Python would run it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def module_at(path: Path, name: str) -> ModuleType:
    """``path`` imported afresh as the module ``name`` (registered under it: a dataclass in it
    looks its module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

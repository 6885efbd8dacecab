"""Where the tests find the repository's files."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"


def load_script(relative: str) -> ModuleType:
    """A script of the repository (e.g. "scripts/benchmark_model.py") imported as a module, so
    a test can call its functions without running it."""
    path = REPO_ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""What a benchmark needs beyond kfs itself, said before it starts instead of a traceback."""

from __future__ import annotations

import importlib.util
import sys


def require(script: str, *modules: str) -> None:
    """Exit with a one-line message when one of ``modules`` cannot be imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"{script} needs {', '.join(missing)}, from the test extras: run "
                 "scripts/setup.sh test first (it installs them into .venv), then "
                 f".venv/bin/python benchmarks/{script}")

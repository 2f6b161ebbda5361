"""What a test needs beyond the checkout: a missing piece skips the test that needs it, or
under CI (environment variable ``CI=true``) fails it: a CI run never passes by skipping."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

from .paths import FIXTURES_ROOT

# CI=true (as GitHub Actions and GitLab CI set it): what a test needs must be there.
CI = os.environ.get("CI", "").lower() == "true"


def unavailable(reason: str) -> NoReturn:
    """End the running test for want of ``reason``: a skip, or under CI a failure."""
    if CI:
        pytest.fail(f"{reason} (CI=true: every test must run)", pytrace=False)
    pytest.skip(reason)


def require_modules(*names: str) -> None:
    """For a test or a fixture (``@pytest.mark.needs_modules(...)`` calls it before the test):
    each of ``names`` must import, else the running test is unavailable(). Never at a module's
    top: a test module imports without its extras (it imports them inside the tests that need
    them), so that a missing one skips only those tests."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (the test extras: scripts/setup.sh test)")


def fixture_path(*parts: str) -> Path:
    """``FIXTURES_ROOT/<parts>``; the calling test is unavailable() when it does not exist."""
    path = FIXTURES_ROOT.joinpath(*parts)
    if not path.exists():
        unavailable(f"fixture {path} is missing")
    return path


def _fuse_missing() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (FUSE kernel module not available)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (install the fuse3 package)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not accessible to this user"
    return None


FUSE_MISSING = _fuse_missing()


def require_fuse() -> None:
    """For code that mounts without the ``mount`` fixture: unavailable() without FUSE."""
    if FUSE_MISSING is not None:
        unavailable(f"FUSE unavailable: {FUSE_MISSING}")

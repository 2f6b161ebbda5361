"""The layering the README's layout section states: the engine (storage/) imports none of the
programs over it, and of those three wings (kfs/mount, kfs/tools, kfs/spark) none imports
another; what two of them share lives in kfs/ itself (kfs/mount_table.py, kfs/args.py)."""

import ast
from pathlib import Path

import pytest

from helpers.paths import REPO

WINGS = ("mount", "tools", "spark")


def imported(path: Path) -> set[str]:
    """The absolute names of the modules ``path`` imports (relative imports resolved)."""
    package = list(path.relative_to(REPO).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


@pytest.mark.parametrize("wing", WINGS)
def test_no_wing_imports_another(wing):
    others = tuple(f"kfs.{w}" for w in WINGS if w != wing)
    found = {f"{p.relative_to(REPO)}: {name}"
             for p in sorted((REPO / "kfs" / wing).glob("*.py"))
             for name in imported(p) if within(name, others)}
    assert not found


def test_the_engine_imports_no_program():
    found = {f"{p.relative_to(REPO)}: {name}" for p in sorted((REPO / "storage").rglob("*.py"))
             for name in imported(p) if within(name, ("kfs",))}
    assert not found


def test_only_the_clock_reads_time_or_sleeps():
    """Kafka's ``Time``: ``storage.clock`` gives milliseconds, monotonic time and sleep, and is
    injected; nothing else in kfs imports ``time`` (so a fixed clock holds a whole run)."""
    found = {str(p.relative_to(REPO)) for root in ("storage", "kfs")
             for p in sorted((REPO / root).rglob("*.py"))
             if any(within(name, ("time",)) for name in imported(p))}
    assert found == {"storage/clock.py"}

"""The layering docs/internals.md's layout section states: the engine (storage/) imports none of the
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


# -- no module-level cache or pool ---------------------------------------------------------

# Constructors of a container (``local``: threading's), and of the project's caches and pools
# (``RecordCache``, ``FilePool``, ``StorePool``: by their names' ends).
_CONTAINERS = {"dict", "list", "set", "bytearray", "OrderedDict", "defaultdict", "deque",
               "Counter", "WeakKeyDictionary", "WeakValueDictionary", "WeakSet", "local"}
_HOLDERS = ("Cache", "Pool")
_LITERALS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
# Methods that change a container or a cache
_MUTATORS = {"add", "append", "appendleft", "clear", "discard", "drop", "extend", "insert",
             "move_to_end", "pop", "popitem", "popleft", "put", "remove", "setdefault", "update"}

# What is kept at module level on purpose, and why; the test fails when an entry goes stale.
ALLOWED_STATE = {
    # the process's stores and metadata folds, bounded (4 + 4): a process lifetime is the
    # point, the next Spark task of a reused worker reuses them, as Spark's Kafka source keeps
    # its consumer pool per executor
    "storage/remote/store_pool.py": {"PROCESS_POOL"},
    # zstandard's contexts, one per thread (they are not thread-safe): no data kept
    "storage/records/compression.py": {"_zstd_local"},
    # each warning about the settings once per process, not once per partition opened
    "storage/config.py": {"_warned"},
    # one lock per checkpoint file, as Kafka's CheckpointFile.write is synchronized: no data
    # kept (owning them by the LogManager, as Kafka's checkpoint objects, is a later step)
    "storage/checkpoint.py": {"_FILE_LOCKS"},
    # the fault-injection switch tests set (inject/remove), not a cache
    "storage/disk_calls.py": {"_active"},
}


def _base_name(node: ast.AST) -> str | None:
    """The name at the root of ``a.b[c].d`` (``a``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _callee(node: ast.AST) -> str:
    func = node.func if isinstance(node, ast.Call) else None
    return func.id if isinstance(func, ast.Name) else \
        func.attr if isinstance(func, ast.Attribute) else ""


def module_state(path: Path) -> set[str]:
    """The names ``path`` binds at module level to state that outlives its users: a cache or
    a pool (``RecordCache(...)``, ``FilePool(...)``), a container or an instance of one of the
    module's classes that the module changes afterwards (``{}``, ``[]``, ``set()``,
    ``OrderedDict()``, ``threading.local()``: changed in place, an item or an attribute stored
    into it, or handed to an object that changes it: ``self.x = NAME``), or a name a function
    rebinds (``global``). A constant table (a dict
    only read) is not state."""
    tree = ast.parse(path.read_text(), str(path))
    bound = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            bound.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and node.value is not None \
                and isinstance(node.target, ast.Name):
            bound[node.target.id] = node.value
    holders = {n for n, v in bound.items() if _callee(v).endswith(_HOLDERS)}
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    containers = {n for n, v in bound.items()  # (and instances of the module's own classes)
                  if isinstance(v, _LITERALS) or _callee(v) in _CONTAINERS | classes}
    changed, rebound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _MUTATORS:
            changed.add(_base_name(node.func.value))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            changed.update(_base_name(t) for t in targets
                           if isinstance(t, (ast.Attribute, ast.Subscript)))
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) \
                    and any(isinstance(t, ast.Attribute) for t in node.targets):
                changed.add(node.value.id)  # (self.x = NAME: changed through the object)
        elif isinstance(node, ast.Global):
            rebound.update(node.names)
    return holders | (containers & changed) | rebound


def test_no_module_level_cache_or_pool():
    """Caches and pools are owned by what uses them (a ``LogManager``'s open files, an object
    store's index objects) and bounded there, not kept in module globals for the process:
    what one user fills is then another's to empty, and no owner says how large it may grow.
    The few kept on purpose are ``ALLOWED_STATE``, each with its reason."""
    found = {str(p.relative_to(REPO)): names for root in ("storage", "kfs")
             for p in sorted((REPO / root).rglob("*.py")) if (names := module_state(p))}
    assert found == ALLOWED_STATE

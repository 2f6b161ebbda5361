"""Each compiled module's type stub (the ``.pyi`` beside its ``.pyx``, as aiokafka ships for its
``_crecords``) names exactly what the built module defines: its public functions and classes
(not the names it imports), each class's public methods and attributes, and each function's
and method's parameters."""

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from helpers.paths import REPO

MODULES = ["storage.records._c.buffers", "storage.records._c.records",
           "storage.records._c.columns", "storage.records._c.scan",
           "storage.records._c.compaction", "kfs.spark._partitioner"]


def stub_names(body: list[ast.stmt]) -> set[str]:
    """The public names a stub's module or class body defines."""
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets)
    return {name for name in names if not name.startswith("_")}


def defined(module) -> set[str]:
    """The public names ``module`` defines itself (what it imports has another __module__)."""
    return {name for name, obj in vars(module).items()
            if not name.startswith("_") and not inspect.ismodule(obj)
            and getattr(obj, "__module__", module.__name__) == module.__name__}


def parameters(node: ast.FunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
            if a.arg != "self"]


@pytest.mark.parametrize("name", MODULES)
def test_each_stub_names_what_its_compiled_module_defines(name):
    module = importlib.import_module(name)
    assert Path(module.__file__).suffix == ".so"  # the build, not a Python stand-in
    stub = ast.parse((REPO / (name.replace(".", "/") + ".pyi")).read_text())
    assert stub_names(stub.body) == defined(module)
    for node in stub.body:
        if isinstance(node, ast.ClassDef):
            cls = getattr(module, node.name)
            assert stub_names(node.body) == {n for n in vars(cls) if not n.startswith("_")}
            functions = [(f, getattr(cls, f.name)) for f in node.body
                         if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")
                         and callable(getattr(cls, f.name))]
        elif isinstance(node, ast.FunctionDef):
            functions = [(node, getattr(module, node.name))]
        else:
            continue
        for function, compiled in functions:
            assert parameters(function) == [
                p for p in inspect.signature(compiled).parameters if p != "self"], function.name

"""Private members of Faust, mode and aiokafka are touched only in
seqkeeper.adapter, and seqkeeper.adapter.PRIVATE_MEMBERS lists exactly
those it touches.

A name counts as upstream-private when it starts with one underscore and
occurs in the installed upstream sources; a use is an attribute access
(``x._name``) or a method defined with that name (an override)."""

from __future__ import annotations

import ast
import importlib
import os
import re
from functools import cache
from pathlib import Path

from seqkeeper.adapter import PRIVATE_MEMBERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "seqkeeper"
ADAPTER = PACKAGE / "adapter"
UPSTREAM = ("faust", "mode", "aiokafka")


@cache
def upstream_private_names() -> frozenset[str]:
    names: set[str] = set()
    for package in UPSTREAM:
        module = importlib.import_module(package)
        assert module.__file__ is not None
        for path in Path(module.__file__).parent.rglob("*.py"):
            names |= set(re.findall(r"\b_[a-z]\w*", path.read_text(errors="ignore")))
    return frozenset(names)


def private_uses(source: str) -> set[str]:
    """Single-underscore names accessed as attributes or defined as methods."""
    used = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = node.name
        else:
            continue
        if name.startswith("_") and not name.startswith("__"):
            used.add(name)
    return used


def own_private_names() -> set[str]:
    """Private names seqkeeper's own code outside the adapter defines: set
    on ``self`` or defined as a function or method there."""
    own: set[str] = set()
    for path in python_files():
        if path.is_relative_to(ADAPTER):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                own.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
    return own


def python_files() -> list[Path]:
    found = []
    for folder, _, files in os.walk(PACKAGE, followlinks=True):
        found += [Path(folder) / f for f in files if f.endswith(".py")]
    return found


def test_the_list_is_exact_per_module() -> None:
    upstream = upstream_private_names()
    modules = {p.stem for p in ADAPTER.glob("*.py")} - {"__init__"}
    assert set(PRIVATE_MEMBERS) <= modules
    for module in sorted(modules):
        used = private_uses((ADAPTER / f"{module}.py").read_text()) & upstream
        assert used == PRIVATE_MEMBERS.get(module, frozenset()), module


def test_nothing_outside_the_adapter_touches_a_private_member() -> None:
    upstream = upstream_private_names()
    own = own_private_names()
    found = {}
    for path in python_files():
        if path.is_relative_to(ADAPTER):
            continue
        touched = (private_uses(path.read_text()) & upstream) - own
        if touched:
            found[str(path.relative_to(ROOT))] = sorted(touched)
    assert not found, found


def test_the_checks_can_fail() -> None:
    assert "_read_offset" in upstream_private_names()
    assert private_uses("consumer._read_offset.get(tp)\ndef _getmany(self): pass\n") == {
        "_read_offset",
        "_getmany",
    }

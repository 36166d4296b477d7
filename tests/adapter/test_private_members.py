"""Private members of Faust, mode and aiokafka are touched only in
seqkeeper.adapter, and seqkeeper.adapter.PRIVATE_MEMBERS lists exactly
those it touches.

A name counts as upstream-private when it starts with one underscore and
occurs in the installed upstream sources; a use is an attribute access
(``x._name``, or ``getattr(x, "_name")`` and its setattr, hasattr and
delattr) or a method defined with that name (an override).

Outside the adapter such a name is ours, not upstream's, only where the
object is ours: on ``self`` in a class of ours that defines it, a method of
a class of ours not derived from an upstream class, or a use listed in
OWN_ELSEWHERE. seqkeeper defining a ``_commit`` of its own does not hide
``consumer._commit``."""

from __future__ import annotations

import ast
import importlib
import os
import re
from dataclasses import dataclass, field
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


#: builtins that access an attribute named by a string
BY_NAME = ("getattr", "setattr", "hasattr", "delattr")


def accessed(node: ast.AST) -> tuple[ast.expr, str] | None:
    """The object and attribute name of ``x.name`` or ``getattr(x, "name")``
    (setattr, hasattr, delattr alike), else None."""
    if isinstance(node, ast.Attribute):
        return node.value, node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in BY_NAME
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return node.args[0], node.args[1].value
    return None


def private_uses(source: str) -> set[str]:
    """Single-underscore names accessed as attributes or defined as methods."""
    used = set()
    for node in ast.walk(ast.parse(source)):
        if (access := accessed(node)) is not None:
            name = access[1]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = node.name
        else:
            continue
        if name.startswith("_") and not name.startswith("__"):
            used.add(name)
    return used


#: Uses outside the adapter of a private name of our own on something other
#: than ``self``, by file: (receiver, name), each on an object of ours.
OWN_ELSEWHERE: dict[str, frozenset[tuple[str, str]]] = {
    # Secret.__eq__: ``other`` is a Secret (checked by isinstance)
    "seqkeeper/settings/variables.py": frozenset({("other", "_value")}),
    # Stores.buffer and Stores.seen point their reusable views at a key
    "seqkeeper/state/stores.py": frozenset({("view", "_partition"), ("view", "_key")}),
}


@dataclass
class OwnClass:
    """A class in our code: the names it defines (methods, class attributes,
    attributes set on ``self``) and its bases."""

    defines: set[str] = field(default_factory=set)
    bases: set[str] = field(default_factory=set)
    upstream_base: bool = False  #: a base imported from Faust, mode or aiokafka


def upstream_bound(tree: ast.Module) -> set[str]:
    """The names a module binds to Faust, mode or aiokafka by importing."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UPSTREAM:
            bound |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in UPSTREAM:
                    bound.add(a.asname or a.name.split(".")[0])
    return bound


def classes_in(tree: ast.Module) -> dict[str, OwnClass]:
    foreign = upstream_bound(tree)
    found: dict[str, OwnClass] = {}
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        own = found.setdefault(cls.name, OwnClass())
        for base in cls.bases:
            text = re.split(r"\[", ast.unparse(base))[0]
            # by its class name: module.Class is the class Class of ours
            # (seqkeeper.adapter's CommitHookConsumer, say) as much as Class is
            own.bases.add(text.split(".")[-1])
            own.upstream_base |= text.split(".")[0] in foreign
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.defines.add(node.name)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                own.defines.add(node.attr)
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign):
                own.defines |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                own.defines.add(stmt.target.id)
    return found


@cache
def own_classes() -> dict[str, OwnClass]:
    """Every class of seqkeeper by name (classes of one name merged)."""
    merged: dict[str, OwnClass] = {}
    for path in python_files():
        for name, cls in classes_in(ast.parse(path.read_text())).items():
            into = merged.setdefault(name, OwnClass())
            into.defines |= cls.defines
            into.bases |= cls.bases
            into.upstream_base |= cls.upstream_base
    return merged


def touched_outside(
    source: str, own_elsewhere: frozenset[tuple[str, str]] = frozenset()
) -> tuple[set[str], set[tuple[str, str]]]:
    """The upstream-private names a module outside the adapter touches, and
    the entries of ``own_elsewhere`` it uses. A name counts as ours, not
    upstream's, only where the object is ours: on ``self`` in a class of
    ours that defines it (not derived from an upstream class), as a method
    of such a class, or as listed in ``own_elsewhere``. So a class of ours
    defining ``_commit`` does not hide ``consumer._commit``."""
    upstream = upstream_private_names()
    tree = ast.parse(source)
    classes = {**own_classes(), **classes_in(tree)}

    def derived(name: str, seen: frozenset[str] = frozenset()) -> bool:
        cls = classes[name]
        return cls.upstream_base or any(
            derived(b, seen | {name}) for b in cls.bases if b in classes and b not in seen
        )

    def defines(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        cls = classes[name]
        out = set(cls.defines)
        for b in cls.bases:
            if b in classes and b not in seen:
                out |= defines(b, seen | {name})
        return out

    touched: set[str] = set()
    used: set[tuple[str, str]] = set()

    def visit(node: ast.AST, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.ClassDef) else cls
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if child.name in upstream and cls is not None and derived(cls):
                    touched.add(child.name)  # an override of an upstream method
            elif (access := accessed(child)) is not None and access[1] in upstream:
                receiver, name = ast.unparse(access[0]), access[1]
                if (receiver, name) in own_elsewhere:
                    used.add((receiver, name))
                elif not (
                    receiver in ("self", "cls", "super()")
                    and cls is not None
                    and not derived(cls)
                    and name in defines(cls)
                ):
                    touched.add(name)
            visit(child, inner)

    visit(tree, None)
    return touched, used


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
    found = {}
    unused = {}
    for path in python_files():
        if path.is_relative_to(ADAPTER):
            continue
        name = str(path.relative_to(ROOT))
        listed = OWN_ELSEWHERE.get(name, frozenset())
        touched, used = touched_outside(path.read_text(), listed)
        if touched:
            found[name] = sorted(touched)
        if used != listed:
            unused[name] = sorted(listed - used)
    assert not found, found
    assert set(OWN_ELSEWHERE) <= {str(p.relative_to(ROOT)) for p in python_files()}
    assert not unused, f"OWN_ELSEWHERE lists uses that are gone: {unused}"


def test_the_checks_can_fail() -> None:
    assert "_read_offset" in upstream_private_names()
    assert private_uses("consumer._read_offset.get(tp)\ndef _getmany(self): pass\n") == {
        "_read_offset",
        "_getmany",
    }
    # classes of ours outside the adapter define a _commit (state/rocksdb.py)
    # and a _thread (client.py): that does not hide a use of Faust's
    outside = set().union(
        *(
            cls.defines
            for path in python_files()
            if not path.is_relative_to(ADAPTER)
            for cls in classes_in(ast.parse(path.read_text())).values()
        )
    )
    assert {"_commit", "_thread"} <= outside & upstream_private_names()
    source = "def flush(app):\n    app.consumer._commit({})\n    return app.consumer._thread\n"
    assert touched_outside(source) == ({"_commit", "_thread"}, set())
    # by name, as much as by attribute
    by_name = "def f(c):\n    return getattr(c, '_commit'), hasattr(c, '_thread')\n"
    assert touched_outside(by_name) == ({"_commit", "_thread"}, set())
    assert private_uses("setattr(consumer, '_read_offset', {})\n") == {"_read_offset"}
    # on self, in a class of ours that defines it: ours
    mine = "class Mine:\n    def _commit(self): pass\n    def go(self): self._commit()\n"
    assert touched_outside(mine) == (set(), set())
    # an override in a class derived from Faust's consumer: touched
    override = (
        "from faust.transport.consumer import Consumer\n"
        "class C(Consumer):\n    async def _commit(self, offsets): pass\n"
    )
    assert touched_outside(override)[0] == {"_commit"}
    # also when derived through a class of ours reached by its module
    indirect = (
        "from seqkeeper.adapter import commit\n"
        "class C(commit.CommitHookConsumer):\n"
        "    async def _commit(self, offsets): pass\n"
        "    def go(self): return self._commit\n"
    )
    assert touched_outside(indirect)[0] == {"_commit"}
    # a receiver listed as ours is ours only where listed
    listed = frozenset({("view", "_key")})
    assert touched_outside("view._key = 1\nother._key\n", listed) == ({"_key"}, {("view", "_key")})

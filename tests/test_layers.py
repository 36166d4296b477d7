"""The dependency graph: configuration at the bottom, the shell on top, and
no cycles, counting imports inside functions too (they hide cycles, they do
not remove them)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "seqkeeper"

#: What each layer may import from seqkeeper (itself always). Everything
#: else in seqkeeper is the shell: the CLI and what serves it.
ALLOWED: dict[str, set[str]] = {
    "seqkeeper.processors": set(),
    "seqkeeper.settings": {"seqkeeper.processors"},
    # how clients connect (TLS, SASL): every layer that creates one uses it
    "seqkeeper.security": {"seqkeeper.processors", "seqkeeper.settings"},
    "seqkeeper.state": {"seqkeeper.processors", "seqkeeper.settings"},
    "seqkeeper.adapter": {
        "seqkeeper.processors",
        "seqkeeper.state",
        "seqkeeper.settings",
        "seqkeeper.security",
    },
    "seqkeeper.spark_sink": {
        "seqkeeper.processors",
        "seqkeeper.state",
        "seqkeeper.settings",
        "seqkeeper.security",
        "seqkeeper.adapter",
    },
    # a topology makes no Faust call: it implements the runtime's protocol
    "seqkeeper.topologies": {
        "seqkeeper.processors",
        "seqkeeper.state",
        "seqkeeper.settings",
        "seqkeeper.runtime.protocol",
    },
    "seqkeeper.runtime.protocol": {"seqkeeper.state.base"},
    "seqkeeper.runtime": {
        "seqkeeper.processors",
        "seqkeeper.state",
        "seqkeeper.settings",
        "seqkeeper.security",
        "seqkeeper.adapter",
    },
}
#: Third-party packages a layer must not import.
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "seqkeeper.processors": {"faust", "mode", "aiokafka", "rocksdict", "pyspark"},
    "seqkeeper.settings": {"faust", "mode", "aiokafka", "rocksdict", "pyspark"},
    "seqkeeper.security": {"faust", "mode", "aiokafka", "rocksdict", "pyspark"},
    "seqkeeper.state": {"faust", "mode", "aiokafka", "pyspark"},
    "seqkeeper.topologies": {"faust", "mode", "aiokafka", "rocksdict", "pyspark"},
    "seqkeeper.runtime.protocol": {"faust", "mode", "aiokafka", "rocksdict", "pyspark"},
}
# Tracing is the runtime's (seqkeeper.runtime.tracing): the cores and the
# topologies make no span.
for _layer in ("seqkeeper.processors", "seqkeeper.state", "seqkeeper.topologies"):
    FORBIDDEN_THIRD_PARTY[_layer] = FORBIDDEN_THIRD_PARTY[_layer] | {"opentelemetry"}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by name, reached through the symlinks."""
    found = {}
    for folder, _, files in os.walk(PACKAGE, followlinks=True):
        for file in files:
            if file.endswith(".py"):
                path = Path(folder) / file
                found[module_name(path)] = path
    return found


def imports(path: Path, name: str) -> set[str]:
    """Every module ``path`` imports, anywhere in it (absolute names)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}
    return found


def layer_of(name: str) -> str:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if name == layer or name.startswith(layer + "."):
            return layer
    return "shell"


def within(name: str, prefixes: set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = {t for t in imports(path, name) if t in mods}
        edges[name] = targets - {name}
    return edges


def test_the_package_is_found() -> None:
    mods = modules()
    assert "seqkeeper.processors.resequencer" in mods
    assert "seqkeeper.topologies.ordered" in mods
    assert "seqkeeper.cli" in mods


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_what_is_below_it(layer: str) -> None:
    mods = modules()
    wrong = {}
    for name, path in mods.items():
        if layer_of(name) != layer:
            continue
        bad = sorted(
            t
            for t in imports(path, name)
            if t.startswith("seqkeeper")
            and t != "seqkeeper"
            and not within(t, ALLOWED[layer] | {layer})
        )
        third = sorted(
            t
            for t in imports(path, name)
            if t.split(".")[0] in FORBIDDEN_THIRD_PARTY.get(layer, ())
        )
        if bad or third:
            wrong[name] = bad + third
    assert not wrong, wrong


def test_the_checks_can_fail() -> None:
    assert layer_of("seqkeeper.topologies.ordered") == "seqkeeper.topologies"
    assert layer_of("seqkeeper.cli") == "shell"
    assert not within("seqkeeper.cli", ALLOWED["seqkeeper.topologies"])
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


#: docs/architecture.md's names of the layers, as ALLOWED names them.
DOC_NAMES = {
    "processors": "seqkeeper.processors",
    "settings": "seqkeeper.settings",
    "security": "seqkeeper.security",
    "state": "seqkeeper.state",
    "adapter": "seqkeeper.adapter",
    "spark_sink": "seqkeeper.spark_sink",
    "topologies": "seqkeeper.topologies",
    "runtime": "seqkeeper.runtime",
    "runtime/protocol.py": "seqkeeper.runtime.protocol",
}


def documented_layers(text: str) -> dict[str, set[str]]:
    """The layers drawn in docs/architecture.md's *Layers and lifecycle*:
    each row's layer (its first column) and what it may import (the last)."""
    block = text.split("## Layers and lifecycle", 1)[1].split("```", 2)[1]
    drawn: dict[str, set[str]] = {}
    for row in block.strip().splitlines():
        where = row.split()[0].removeprefix("seqkeeper/").removesuffix("/").removesuffix(".py")
        if where not in DOC_NAMES:
            continue  # (the shell's row)
        below = row.rsplit("  ", 1)[1].split("(")[0].strip()
        names = set() if below == "nothing" else {n.strip() for n in below.split(",")}
        drawn[DOC_NAMES[where]] = {DOC_NAMES[n] for n in names}
    return drawn


def test_the_architecture_document_draws_the_layers_as_they_are() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    layers = {k: v for k, v in ALLOWED.items() if k != "seqkeeper.runtime.protocol"}
    assert documented_layers(text) == layers
    # a row that says less than the rule is seen
    wrong = text.replace("nothing (no Kafka", "settings (no Kafka", 1)
    assert documented_layers(wrong) != layers


#: Packages counted as one node by :func:`test_no_cycle_between_the_demo_and_its_tools`:
#: an import of any of their modules is an import of the package.
TOOLS = ("seqkeeper.verification", "seqkeeper.fleet", "seqkeeper.bench")


def collapsed(edges: dict[str, set[str]], packages: tuple[str, ...]) -> dict[str, set[str]]:
    """``edges`` with every module of ``packages`` merged into its package."""

    def node(name: str) -> str:
        return next((p for p in packages if within(name, {p})), name)

    merged: dict[str, set[str]] = {}
    for name, targets in edges.items():
        merged.setdefault(node(name), set()).update(node(t) for t in targets)
    return {name: targets - {name} for name, targets in merged.items()}


def test_no_cycle_between_the_demo_and_its_tools() -> None:
    """The demo uses the verification and the fleet; the verification
    (chaos) and the bench use the fleet; none of them imports back (the
    verification once imported the demo's publishing and read-back, and
    the demo the verification's checks: a cycle between the two, hidden by
    counting modules rather than packages)."""
    edges = collapsed(graph(), TOOLS)
    involved = {"seqkeeper.demo", *TOOLS}
    assert [c for c in cycles(edges) if involved & set(c)] == []
    assert "seqkeeper.verification" in edges["seqkeeper.demo"]  # (the graph holds the edges)
    assert "seqkeeper.fleet" in edges["seqkeeper.verification"]
    for tool in TOOLS:
        assert "seqkeeper.demo" not in edges[tool], tool


def test_the_fleet_is_below_its_users() -> None:
    """The fleet (worker processes, publishing, probes, offsets) imports
    none of the tools that use it."""
    edges = collapsed(graph(), TOOLS)
    users = {"seqkeeper.demo", "seqkeeper.verification", "seqkeeper.bench", "seqkeeper.cli"}
    assert edges["seqkeeper.fleet"], "the fleet imports something"
    assert not edges["seqkeeper.fleet"] & users, edges["seqkeeper.fleet"] & users
    assert collapsed({"a.x": {"b.y"}, "b.y": {"a.z"}}, ("a", "b")) == {"a": {"b"}, "b": {"a"}}
    assert cycles(collapsed({"a.x": {"b.y"}, "b.y": {"a.z"}}, ("a", "b"))) == [["a", "b"]]

"""No import cycle inside radixkv/, and no import that runs back up: every import counts, at module
level, inside a function (a late import that dodges a cycle at run time) and under TYPE_CHECKING (a
type-only cycle is still one).

The graph is read from the source with `ast`, module to module: `from radixkv.x import y` is an
edge to radixkv.x.y when y is a module, else to radixkv.x (the package's __init__).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "radixkv"


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    files = {".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: strip level - 1 packages from here
                    base = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1] + [base]).strip(".")
                for a in node.names:
                    target = f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                    if target in files and target != name:
                        edges.add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle as [a, b, ..., a], or [] when the graph has none (iterative three-colour DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return []


# Dependencies point one way (DESIGN.md, "Package layout"): importer -> what it must never import.
# The tree core and its index sit above eviction (policies see nodes through eviction/view.py); the
# pools and kernels know nothing of the tree; Sequences and cascade plans hold opaque LockHandles;
# generation loops and the fleet use the public API only.
NEVER = {
    "radixkv.eviction": {"radixkv.radix", "radixkv.pools", "radixkv.kernels", "radixkv.cache", "radixkv.sequences"},
    "radixkv.radix": {"radixkv.pools", "radixkv.kernels", "radixkv.cache", "radixkv.sequences", "radixkv.cascade",
                      "radixkv.host_tier", "radixkv.integrations", "radixkv.cluster"},
    "radixkv.pools": {"radixkv.radix", "radixkv.eviction", "radixkv.cache", "radixkv.sequences"},
    "radixkv.kernels": {"radixkv.radix", "radixkv.eviction", "radixkv.pools", "radixkv.cache", "radixkv.sequences"},
    "radixkv.sequences": {"radixkv.radix", "radixkv.eviction", "radixkv.cache"},
    "radixkv.cascade": {"radixkv.radix", "radixkv.eviction", "radixkv.cache"},
    "radixkv.integrations": {"radixkv.radix", "radixkv.eviction", "radixkv.pools", "radixkv.sequences"},
    "radixkv.cluster": {"radixkv.radix", "radixkv.eviction", "radixkv.pools", "radixkv.sequences"},
}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def upward_imports(graph: dict[str, set[str]], never: dict[str, set[str]] = NEVER) -> list[str]:
    """Every edge `a -> b` that a rule `never[prefix of a] contains a prefix of b` forbids."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  for low, banned in never.items() if _within(a, low) and any(_within(b, x) for x in banned))


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """radixkv's graph, parsed once for both package tests (neither changes it)."""
    return import_graph()


def test_radixkv_has_no_import_that_runs_back_up(graph: dict[str, set[str]]) -> None:
    assert "radixkv.radix.tree" in graph and "radixkv.eviction.policies" in graph, "the graph reads the package"
    assert not upward_imports(graph)


def test_an_upward_import_is_found() -> None:
    """The checker itself, on a toy graph: a type-only edge from eviction into radix is one."""
    graph = {"radixkv.radix.tree": {"radixkv.eviction"}, "radixkv.eviction": {"radixkv.eviction.view"},
             "radixkv.eviction.view": set()}
    assert upward_imports(graph) == []
    graph["radixkv.eviction.view"].add("radixkv.radix.node")
    assert upward_imports(graph) == ["radixkv.eviction.view -> radixkv.radix.node"]


def test_radixkv_has_no_import_cycle(graph: dict[str, set[str]]) -> None:
    assert "radixkv.cache" in graph and "radixkv.radix.tree" in graph["radixkv.radix"], "the graph reads the package"
    cycle = find_cycle(graph)
    assert not cycle, " -> ".join(cycle)


def test_a_cycle_is_found_when_there_is_one() -> None:
    """The finder itself: a type-only back edge closes a cycle (what the package test must catch)."""
    graph = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert find_cycle(graph) == []
    graph["c"].add("a")
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_the_graph_sees_late_and_type_only_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "x.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.y import Y\n")
    (pkg / "y.py").write_text("def f():\n    from . import x\n    return x\n")
    graph = import_graph(pkg)
    assert graph["pkg.x"] == {"pkg.y"} and graph["pkg.y"] == {"pkg.x"}
    assert find_cycle(graph) == ["pkg.x", "pkg.y", "pkg.x"]

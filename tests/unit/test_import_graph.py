"""The import graph of src/gpucert (issue 24, step 1): no circle, and no edge from a rule or from the statistics up
into the evaluation, the run, the pytest layer or the CLI. Built with the stdlib `ast` from every import statement:
module-level and inside functions, TYPE_CHECKING blocks included (a circle hidden behind TYPE_CHECKING or a
function-level import is still a circle in the design)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "gpucert"
# what a rule (evaluate/rules/*) and the statistics (evaluate/stats.py) must never import
UPWARD = ("gpucert.evaluate.evaluation", "gpucert.plan.run", "gpucert.pytest", "gpucert.cli")


def _module_name(path: Path, root: Path = SRC) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module a relative `from ..x import` names, seen from `module`."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, target] if target else base)


def imports_of(path: Path, modules: set[str], root: Path = SRC) -> set[str]:
    """The gpucert modules `path` imports anywhere in its body: `import a.b`, `from a import b` (b's module when b is
    a submodule, else a)."""
    module = _module_name(path, root)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, path.name == "__init__.py", node.level, node.module)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add(sub if sub in modules else source)
    return {m for m in found if m in modules and m != module}


def import_graph() -> dict[str, set[str]]:
    paths = sorted((SRC / PACKAGE).rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): imports_of(p, modules) for p in paths}


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of more than one module that reach each other (a strongly connected component), each sorted:
    the circles. A module that imports itself is no circle (`imports_of` drops it)."""
    reach = {v: _reach(graph, v) for v in graph}
    components = {frozenset({v} | {w for w in reach[v] if v in reach.get(w, ())}) for v in graph}
    return sorted(sorted(c) for c in components if len(c) > 1)


def _upward(module: str) -> bool:
    return any(module == u or module.startswith(f"{u}.") for u in UPWARD)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The builder finds module-level, function-level and TYPE_CHECKING imports, absolute and relative: a graph
    that missed one would pass a circle."""
    pkg = tmp_path / "gpucert" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "gpucert" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (tmp_path / "gpucert" / "a.py").write_text("")
    (tmp_path / "gpucert" / "b.py").write_text("")
    (tmp_path / "gpucert" / "c.py").write_text("")
    (pkg / "d.py").write_text("")
    source = (
        "from typing import TYPE_CHECKING\nimport gpucert.a\nif TYPE_CHECKING:\n    from gpucert import b\n"
        "def f():\n    from ..c import x\n    from . import d\n"
    )
    (pkg / "e.py").write_text(source)
    modules = {"gpucert", "gpucert.a", "gpucert.b", "gpucert.c", "gpucert.sub", "gpucert.sub.d", "gpucert.sub.e"}
    assert imports_of(pkg / "e.py", modules, tmp_path) == {"gpucert.a", "gpucert.b", "gpucert.c", "gpucert.sub.d"}
    assert cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_no_import_circle() -> None:
    found = cycles(import_graph())
    assert not found, "import circles (each a set of modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


@pytest.mark.parametrize("room", ["gpucert.evaluate.rules", "gpucert.evaluate.stats"])
def test_rules_and_statistics_never_import_upwards(room: str) -> None:
    graph = import_graph()
    edges = [
        f"{m} -> {t}"
        for m, targets in sorted(graph.items())
        if m == room or m.startswith(f"{room}.")
        for t in sorted(targets)
        if _upward(t)
    ]
    assert graph, "no modules found under src/gpucert"
    assert not edges, "rules and statistics import upwards:\n" + "\n".join(edges)

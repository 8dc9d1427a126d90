"""The package layout: no import circles (a function-level import does not hide one), each layer
imports only the layers below it, and every module imports in a fresh interpreter.

Layers, lowest first: `graft` (the shared model and the query engine) < `graphbuild` (corpus ->
index) and `training` (index -> model) < `eval` < `cli`. `graft.web` (the explorer `graft serve`
runs) is a front end like `cli`, above the others. Imports under `if TYPE_CHECKING:` are
annotations only and do not count.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

PACKAGES = ("graft", "graphbuild", "training", "eval", "cli")
#: What each package may import from the others.
ALLOWED = {
    "graft": set(),
    "graphbuild": {"graft"},
    "training": {"graft"},
    "eval": {"graft", "graphbuild", "training"},
    "cli": {"graft", "graphbuild", "training", "eval", "graft.web"},
    "graft.web": {"graft", "graphbuild", "training", "eval", "cli"},
}


def layer(module: str) -> str:
    """A module's layer: its top package, but `graft.web` is a front end of its own."""
    return "graft.web" if module == "graft.web" or module.startswith("graft.web.") else module.split(".")[0]


def module_files(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for the library packages under `root` (the scripts under
    eval/benchmarks are not imported by the library and are left out)."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if rel.parts[:2] == ("eval", "benchmarks"):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, name: str, modules: set[str]) -> list[tuple[str, int, bool, list[str]]]:
    """The project modules a file imports: (module, line, at function level, imported names),
    anywhere but under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    out: list[tuple[str, int, bool, list[str]]] = []

    def resolve(node: ast.ImportFrom) -> str | None:
        if not node.level:
            return node.module
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit(other, nested)
                continue
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name in modules:
                        out.append((alias.name, child.lineno, nested, []))
            elif isinstance(child, ast.ImportFrom):
                base = resolve(child)
                if base is None:
                    continue
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    if full in modules:  # `from graft import encoder`: the module itself
                        out.append((full, child.lineno, nested, []))
                    elif base in modules:
                        out.append((base, child.lineno, nested, [alias.name]))
            visit(child, inner)

    visit(tree, False)
    return out


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, dict[str, list[str]]]:
    """module -> imported project module -> where ("path:line", "(in a function)" when nested)."""
    files = module_files(root, packages)
    names = set(files)
    graph: dict[str, dict[str, list[str]]] = {m: {} for m in files}
    for module, path in files.items():
        for target, line, nested, _ in imports_of(path, module, names):
            if target != module:
                where = f"{path.relative_to(root)}:{line}" + (" (in a function)" if nested else "")
                graph[module].setdefault(target, []).append(where)
    return graph


def circles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def describe(graph: dict[str, dict[str, list[str]]], comp: list[str]) -> str:
    inside = set(comp)
    edges = [f"  {a} -> {b} at {', '.join(graph[a][b])}" for a in comp for b in sorted(graph[a]) if b in inside]
    return "circle among " + ", ".join(comp) + ":\n" + "\n".join(edges)


def test_no_import_circles() -> None:
    """No module reaches itself through imports, function-level ones included (a late import that
    closes a circle only hides it)."""
    graph = import_graph(REPO)
    assert len(graph) > 80
    found = circles(graph)
    assert not found, "\n".join(describe(graph, c) for c in found)


def test_the_scan_finds_a_circle_hidden_in_a_function(tmp_path) -> None:
    """The scan itself: a function-level import that closes a circle is found, one under
    `if TYPE_CHECKING:` is not an import, and relative imports resolve."""
    pkg = tmp_path / "graft"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from graft.b import thing\n")
    (pkg / "b.py").write_text("def thing():\n    from graft import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from graft.d import D\n")
    (pkg / "d.py").write_text("from .c import x\n")
    graph = import_graph(tmp_path, ("graft",))
    assert circles(graph) == [["graft.a", "graft.b"]]
    assert "(in a function)" in describe(graph, ["graft.a", "graft.b"])
    assert graph["graft.d"] == {"graft.c": ["graft/d.py:1"]} and graph["graft.c"] == {}


@pytest.mark.parametrize("package", [*PACKAGES, "graft.web"])
def test_each_layer_imports_only_the_layers_below(package) -> None:
    """graft imports none of graphbuild, training, eval, cli or its own front end graft.web;
    graphbuild and training import graft only; eval no cli."""
    graph = import_graph(REPO)
    wrong = [f"{m} -> {t} at {', '.join(w)}" for m, targets in graph.items() if layer(m) == package
             for t, w in targets.items() if layer(t) != package and layer(t) not in ALLOWED[package]]
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_another_s_private_names() -> None:
    """A name starting with `_` is its module's own: the commands share cli/common.py, not cli/app.py's
    internals."""
    files = module_files(REPO)
    names = set(files)
    wrong = [f"{path.relative_to(REPO)}:{line} imports {n} from {target}"
             for module, path in files.items() for target, line, _, imported in imports_of(path, module, names)
             for n in imported if n.startswith("_") and target != module]
    assert not wrong, "\n".join(wrong)
    assert not any(t == "cli.app" for m, targets in import_graph(REPO).items() if m != "cli.app" for t in targets)


def test_every_module_imports_in_a_fresh_interpreter() -> None:
    """Every library module imports in a fresh interpreter, the highest layer first (cli, eval,
    ...), so that no module relies on another having been imported before it."""
    order = sorted(module_files(REPO), key=lambda m: (-PACKAGES.index(m.split(".")[0]), m))
    script = ("import importlib\n"
              f"for m in {order!r}:\n"
              "    importlib.import_module(m)\n")
    res = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]

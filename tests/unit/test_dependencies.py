"""Dependencies point one way: transport → tasks → (handlers, stores, live), and no module
imports, directly or through others, a module that imports it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("a2a_gateway", "handlers")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_imports(path: Path, known: set[str]) -> set[str]:
    """Project modules ``path`` imports at module level, those for type checking included
    (a cycle through annotations is still a cycle for the reader); not inside functions."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        for sub in [node] if not isinstance(node, ast.If | ast.Try) else ast.walk(node):
            if isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                base = sub.module
                for alias in sub.names:
                    candidate = f"{base}.{alias.name}"
                    found.add(candidate if candidate in known else base)
            elif isinstance(sub, ast.Import):
                found.update(alias.name for alias in sub.names)
    return {name for name in found if name in known}


def _graph() -> dict[str, set[str]]:
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    known = {_module_name(p) for p in paths}
    return {_module_name(p): _module_imports(p, known) - {_module_name(p)} for p in paths}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], dict.fromkeys(graph, 0)  # 0 new, 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if dep.endswith("__init__") or dep not in graph:
                continue
            if state[dep] == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif state[dep] == 0:
                visit(dep)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if state[node] == 0:
            visit(node)
    return cycles


def test_no_module_imports_a_module_that_imports_it():
    graph = {name: deps - {n for n in deps if graph_package(n)} for name, deps in _graph().items()}
    assert _cycles(graph) == []


def graph_package(name: str) -> bool:
    """Package ``__init__`` modules re-export; an import of the package is not a cycle."""
    return name in PACKAGES


def _imports_under(prefix: str) -> dict[str, set[str]]:
    return {name: deps for name, deps in _graph().items() if name.startswith(prefix)}


def test_the_layers_import_only_downwards():
    above = {
        "a2a_gateway.tasks": ("a2a_gateway.transport", "a2a_gateway.app", "a2a_gateway.state", "a2a_gateway.cli"),
        "a2a_gateway.live": ("a2a_gateway.tasks", "a2a_gateway.transport", "a2a_gateway.app", "a2a_gateway.state"),
        "a2a_gateway.stores": ("a2a_gateway.tasks", "a2a_gateway.live", "a2a_gateway.transport",
                               "a2a_gateway.endpoints.registry", "a2a_gateway.app", "a2a_gateway.state"),
        "handlers": ("a2a_gateway",),
    }
    wrong = {
        (module, dep)
        for layer, forbidden in above.items()
        for module, deps in _imports_under(layer).items()
        for dep in deps
        if dep.startswith(forbidden)
    }
    assert wrong == set()


def test_the_run_never_imports_the_engine():
    graph = _graph()
    assert "a2a_gateway.tasks.engine" not in graph["a2a_gateway.tasks.run"]
    assert "a2a_gateway.tasks.engine" not in graph["a2a_gateway.live.hub"]

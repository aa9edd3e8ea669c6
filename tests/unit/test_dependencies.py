"""Dependencies point one way, and the folders show it.

Each folder of ``a2a_gateway`` (``stores/``, ``tasks/``, ...), each module at its root and the
``handlers`` package is a node. ``LAYERS`` stacks the nodes: the handler contract at the
bottom, the foundations on it, the stages of a request above them, the wiring on top. A node
imports only nodes of lower layers, no folder imports a folder that imports it, and no module
imports, directly or through others, a module that imports it. Every import counts: inside a
function (a lazy import is still a dependency) and for type checking (a cycle through
annotations is still a cycle for the reader)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("a2a_gateway", "handlers")

FOUNDATIONS = ("a2a_gateway.settings", "a2a_gateway.errors", "a2a_gateway.protojson",
               "a2a_gateway.events", "a2a_gateway.observability")
LAYERS: tuple[tuple[str, ...], ...] = (
    ("handlers",),  # the handler contract and one bridge per framework: nothing of the gateway
    ("a2a_gateway.generation",),  # the A2A 1.1 fields the SDK's types lack, under every event
    FOUNDATIONS,
    ("a2a_gateway.stores",),
    ("a2a_gateway.governance",),  # usage, quotas and the audit log, written to the store
    ("a2a_gateway.live", "a2a_gateway.auth"),
    ("a2a_gateway.endpoints",),
    ("a2a_gateway.tasks",),
    ("a2a_gateway.state",),  # the app's typed keys, which the HTTP side reads
    ("a2a_gateway.transport", "a2a_gateway.console"),
    ("a2a_gateway.shutdown",),
    ("a2a_gateway.app",),
    ("a2a_gateway.lambda_handler", "a2a_gateway.cli"),
    ("a2a_gateway.__main__",),
)
"""Low to high; the nodes of one layer do not import each other."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_imports(path: Path, known: set[str]) -> set[str]:
    """Project modules ``path`` imports anywhere in it (in functions and for type checking too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in known}


def _graph() -> dict[str, set[str]]:
    """Module → the project modules it imports; an import of ``a2a_gateway`` or ``handlers``
    themselves (their ``__init__`` only names the package) is left out."""
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    known = {_module_name(p) for p in paths}
    return {_module_name(p): _module_imports(p, known) - {_module_name(p), *PACKAGES}
            for p in paths}


def _node(module: str) -> str:
    """The folder (or root module, or ``handlers``) ``module`` belongs to."""
    parts = module.split(".")
    return parts[0] if parts[0] != "a2a_gateway" else ".".join(parts[:2])


def _node_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, deps in _graph().items():
        if module not in PACKAGES:
            graph.setdefault(_node(module), set()).update(_node(dep) for dep in deps)
    return {node: deps - {node} for node, deps in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], dict.fromkeys(graph, 0)  # 0 new, 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if dep not in graph:
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


def test_imports_inside_functions_and_for_type_checking_count():
    graph = _graph()
    assert "a2a_gateway.endpoints.card_keys" in graph["a2a_gateway.app"]  # only inside build_app
    assert "a2a_gateway.auth.rate_limit" in graph["a2a_gateway.auth.config"]  # for type checking


def test_no_module_imports_a_module_that_imports_it():
    assert _cycles(_graph()) == []


def test_no_folder_imports_a_folder_that_imports_it():
    assert _cycles(_node_graph()) == []


def test_every_folder_and_root_module_has_a_layer():
    placed = {node for layer in LAYERS for node in layer}
    assert set(_node_graph()) == placed


def test_the_layers_import_only_downwards():
    layer_of = {node: index for index, layer in enumerate(LAYERS) for node in layer}
    upward = {
        (module, dep)
        for module, deps in _graph().items() if module not in PACKAGES
        for dep in deps
        if _node(dep) != _node(module) and layer_of[_node(dep)] >= layer_of[_node(module)]
    }
    assert upward == set()


def test_the_run_never_imports_the_engine():
    graph = _graph()
    assert "a2a_gateway.tasks.engine" not in graph["a2a_gateway.tasks.run"]
    assert "a2a_gateway.tasks.engine" not in graph["a2a_gateway.live.hub"]

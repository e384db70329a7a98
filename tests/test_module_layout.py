"""The module layout holds: no import circle among Tidemark's own modules, the control plane does
not import the worker's Celery tasks (tasks are sent by name)."""

import ast
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
PACKAGES = ("inventory", "workers", "controlplane")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """module -> Tidemark modules it imports (anywhere in it, lazy imports included)."""
    modules = {
        _module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            else:
                continue
            # the longest known module each imported name refers to
            for imported in names:
                while imported and imported not in modules:
                    imported = imported.rpartition(".")[0]
                if imported and imported != name:
                    targets.add(imported)
        graph[name] = targets
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def _without_package_inits(graph):
    # a package's __init__ importing its submodules (controlplane -> controlplane.celery) is how
    # Python packages work, not a dependency between modules
    return {
        name: {t for t in targets if not name.startswith(f"{t}.")}
        for name, targets in graph.items()
    }


def test_no_import_circle_among_tidemarks_modules():
    graph = _without_package_inits(_imports())
    assert _cycle(graph) == []


def test_the_control_plane_never_imports_the_workers_tasks():
    graph = _imports()
    importers = sorted(
        name
        for name, targets in graph.items()
        if name.startswith("inventory")
        and any(
            t == "workers.tasks" or t == "workers.executors" or t.startswith("workers.warm")
            for t in targets
        )
    )
    assert importers == []

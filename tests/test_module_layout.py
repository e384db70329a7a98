"""The module layout holds: no import circle among Tidemark's own modules, the control plane does
not import the worker's Celery tasks (tasks are sent by name), and every operator action is
declared once (inventory/actions.py) and read by the API, the admin and the dashboard."""

import ast
from pathlib import Path

import pytest
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


# ---- operator actions declared once -------------------------------------------------------------


def test_every_declared_action_names_a_service_that_exists():
    from inventory.actions import ACTIONS

    for key, action in ACTIONS.items():
        assert callable(action.service_function()), key
        assert action.role in ("viewer", "operator", "admin"), key


def test_the_apis_roles_are_the_declared_ones():
    from inventory.actions import ACTIONS
    from inventory.api import views

    by_viewset = {
        "connectors": views.ConnectorViewSet,
        "jobs": views.JobViewSet,
        "batches": views.BatchViewSet,
        "backfills": views.BackfillViewSet,
    }
    for key, action in ACTIONS.items():
        if action.api is None:
            continue
        viewset, drf_action = action.api
        assert by_viewset[viewset].action_roles[drf_action] == action.role, key
    for viewset, cls in by_viewset.items():
        declared = {a.api[1] for a in ACTIONS.values() if a.api and a.api[0] == viewset}
        assert set(cls.action_roles) == declared, viewset


@pytest.mark.parametrize(
    "admin_class, function, key",
    [
        ("ConnectorAdmin", "pause_connectors", "connector.pause"),
        ("ConnectorAdmin", "resume_connectors", "connector.resume"),
        ("BatchAdmin", "retry_batches", "batch.retry"),
        ("BatchAdmin", "cancel_batches", "batch.cancel"),
        ("BatchAdmin", "skip_batches", "batch.skip"),
        ("BackfillAdmin", "pause_backfills", "backfill.pause"),
        ("BackfillAdmin", "resume_backfills", "backfill.resume"),
        ("BackfillAdmin", "cancel_backfills", "backfill.cancel"),
    ],
)
def test_the_admins_actions_need_the_declared_role(admin_class, function, key):
    from inventory import admin
    from inventory.actions import ACTIONS

    permissions = getattr(getattr(admin, admin_class), function).allowed_permissions
    assert list(permissions) == [admin.ROLE_PERMISSION[ACTIONS[key].role]]

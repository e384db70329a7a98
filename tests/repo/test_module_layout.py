"""The module layout holds: no import circle among Tidemark's own modules, imports go one way
between the layers (docs/architecture.md, "Layers"), every source kind is registered on both the
control side and the worker side, and every operator action is declared once (inventory/actions.py)
and read by the API, the admin and the dashboard."""

import ast
import functools
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.python_ast import parse

ROOT = Path(settings.BASE_DIR)
PACKAGES = ("inventory", "workers", "controlplane")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """module -> Tidemark modules it imports (anywhere in it, lazy imports included); a fresh
    copy of one parse per test session."""
    return {name: set(targets) for name, targets in _parsed_imports().items()}


@functools.cache
def _parsed_imports() -> dict[str, frozenset[str]]:
    modules = {
        _module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(parse(path.read_text())):
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
        graph[name] = frozenset(targets)
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


# ---- layers: imports go one way ------------------------------------------------------------------
#
#   workers.spark   the Spark side: Django-free, imports nothing of Tidemark outside workers.spark
#   inventory,      the control plane: imports no workers module but the workers.spark library
#   controlplane    (processors, sinks and Kafka are checked with the code the executors run)
#   workers         tasks, execution, executors: on top, may import all of the above


def _is_spark_side(module: str) -> bool:
    return module == "workers.spark" or module.startswith("workers.spark.")


def layer_breaks(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs that import against the layer order above."""
    breaks = []
    for name, targets in graph.items():
        for target in targets:
            if _is_spark_side(name):
                wrong = not _is_spark_side(target)
            elif name.split(".")[0] in ("inventory", "controlplane"):
                wrong = target.split(".")[0] == "workers" and not _is_spark_side(target)
            else:
                wrong = False
            if wrong:
                breaks.append((name, target))
    return sorted(breaks)


def test_imports_go_one_way_between_the_layers():
    assert layer_breaks(_imports()) == []


@pytest.mark.parametrize(
    "importer, imported",
    [
        ("workers.spark.sources.kafka", "inventory.models"),
        ("workers.spark.run", "workers.tasks"),
        ("workers.spark.sinks", "controlplane.settings"),
        ("inventory.services.dispatch", "workers.tasks"),
        ("inventory.sources.kafka", "workers.execution"),
        ("controlplane.celery", "workers.executors"),
    ],
)
def test_an_import_against_the_layers_is_caught(importer, imported):
    graph = _imports()
    assert layer_breaks(graph) == []
    graph[importer] = graph[importer] | {imported}
    assert layer_breaks(graph) == [(importer, imported)]


# ---- services see the sources through a kind's object only ------------------------------------
#
# inventory.services asks `kind_of(connector)` (inventory/sources/registry.py) and names the
# hooks' types (inventory/sources/base.py); it imports no kind and no other sources module, so a
# kind's folder can change without a service changing, and services and sources never import
# each other in a circle.

SOURCES_FOR_SERVICES = ("inventory.sources.base", "inventory.sources.registry")


def services_source_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(service module, sources module) pairs other than the two above."""
    return sorted(
        (name, target)
        for name, targets in graph.items()
        if name == "inventory.services" or name.startswith("inventory.services.")
        for target in targets
        if (target == "inventory.sources" or target.startswith("inventory.sources."))
        and target not in SOURCES_FOR_SERVICES
    )


def test_services_import_only_the_base_and_the_registry_of_the_sources():
    assert services_source_imports(_imports()) == []


@pytest.mark.parametrize(
    "imported",
    ["inventory.sources.kafka", "inventory.sources.items", "inventory.sources.config"],
)
def test_a_services_import_of_another_sources_module_is_caught(imported):
    graph = _imports()
    graph["inventory.services.capabilities"] |= {imported}
    assert services_source_imports(graph) == [("inventory.services.capabilities", imported)]


def _string_imports(path: Path) -> list[str]:
    """Tidemark modules a file imports by a name in a string (import_module, __import__, import_string)."""
    found = []
    for node in ast.walk(parse(path.read_text())):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        if (
            called in ("import_module", "__import__", "import_string")
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value.split(".")[0] in PACKAGES
        ):
            found.append(first.value)
    return found


def test_no_tidemark_module_is_imported_by_a_name_in_a_string():
    # source kinds and readers are registered by importing their modules (a reader, grep or an
    # editor can follow them); plugin processors come from entry points (plugin loading)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                assert _string_imports(path) == [], path


def test_a_string_import_is_caught(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        'from importlib import import_module\nimport_module("inventory.sources.kafka")\n'
    )
    assert _string_imports(sample) == ["inventory.sources.kafka"]


# ---- source kinds: one folder per kind on each side -------------------------------------------


def test_every_source_kind_is_one_folder_registered_by_name_with_its_reader():
    from inventory.models import ConnectorKind
    from inventory.sources.base import SourceKind
    from inventory.sources.registry import KINDS
    from workers.spark.sources.registry import READERS, SourceReader

    for name, kind in KINDS.items():
        assert isinstance(kind, SourceKind), name
        assert kind.name == name
        # the kind's object lives in its own folder, inventory/sources/<name>/
        assert type(kind).__module__.startswith(f"inventory.sources.{name}"), name
        assert (ROOT / "inventory" / "sources" / name / "__init__.py").is_file(), name
    for name, reader in READERS.items():
        assert isinstance(reader, SourceReader), name
        assert reader.__name__ == f"workers.spark.sources.{name}", name
    # a kind without a reader of its own lists files, read by the files reader
    assert {name for name, kind in KINDS.items() if kind.has_reader} == set(READERS)
    # every connector kind is served by a kind of the same name (so `kind_of` always answers)
    assert {k.value for k in ConnectorKind} <= set(KINDS)
    # a kind discovers its items itself or its items come from elsewhere (job commits, a meta
    # table in Tidemark's database): what it says matches what it does
    for name, kind in KINDS.items():
        assert kind.discovers_items == (type(kind).discover is not SourceKind.discover), name


# ---- operator actions declared once -------------------------------------------------------------


def test_every_declared_action_names_a_service_that_exists():
    from inventory.actions import ACTIONS

    for key, action in ACTIONS.items():
        assert callable(action.service), key
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

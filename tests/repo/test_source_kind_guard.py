"""What differs between source kinds is asked of the kind's object (`kind_of(connector).<hook>`,
inventory/sources/base.py), never decided by comparing kind names or probing a kind's module:
a scan of every module outside the kinds' folders, in the manner of the status-transition scan
(tests/sql/test_status_transitions.py).

Inside a kind's folder (`inventory/sources/<kind>/`, `workers/spark/sources/<kind>*.py`) a kind
knows its own name. Two places outside may name kinds, each the one place for what it does:
`inventory/sources/registry.py` chooses the kind object for a connector's kind and config, and
`inventory/models/connectors.py` declares the `ConnectorKind` choices (and the unit of their
weights, read by the model itself: models sit below every kind and cannot ask one). A sink's kind
is not a source kind: a comparison whose other side names a sink is not a kind branch, and the
sinks' own dispatcher (`workers/spark/sinks.py`, whose `kind` is a sink's) is not scanned.
"""

import ast
from pathlib import Path

from django.conf import settings

from tests.support.python_ast import parse

ROOT = Path(settings.BASE_DIR)
PACKAGES = ("inventory", "workers", "controlplane")
ALLOWED = {
    "inventory/sources/registry.py",
    "inventory/models/connectors.py",
    "workers/spark/sinks.py",
}
# the hook names of inventory/sources/base.py and the worker's readers: probing a module or an
# object for one of them (hasattr, getattr with a default) is a branch on its kind
HOOKS = {
    "validate",
    "discover",
    "discovers",
    "after_discover",
    "item_source",
    "read_spec",
    "derived",
    "confine",
    "check_watermark_type",
    "covered_watermark",
    "handover_set",
    "synced_offsets",
    "time_range_to_ids",
    "retention_probe",
}


def _kind_names() -> set[str]:
    from inventory.models import ConnectorKind
    from inventory.sources.registry import KINDS

    return set(KINDS) | set(ConnectorKind.values)


def _inside_a_kind(relative: str, names: set[str]) -> bool:
    parts = relative.split("/")
    if parts[:2] == ["inventory", "sources"] and len(parts) > 3 and parts[2] in names:
        return True  # inventory/sources/<kind>/...
    if parts[:3] == ["workers", "spark", "sources"] and len(parts) == 4:
        return any(parts[3] == f"{name}.py" or parts[3].startswith(f"{name}_") for name in names)
    return False


def _python_files():
    names = _kind_names()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "migrations" in path.parts or relative in ALLOWED:
                continue
            if not _inside_a_kind(relative, names):
                yield relative, path


def _names_a_kind(node: ast.AST, names: set[str]) -> bool:
    """`ConnectorKind.TABLE`, `"kafka"`, or a tuple/list/set of them."""
    if isinstance(node, ast.Attribute) and ast.unparse(node.value).endswith("ConnectorKind"):
        return node.attr.isupper()
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in names
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_kind(element, names) for element in node.elts)
    return False


def kind_branches(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, code) of each comparison with a source kind's name, and each probe of a hook."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [side for side in sides if _names_a_kind(side, names)]
            others = [side for side in sides if side not in named]
            if named and not any("sink" in ast.unparse(other) for other in others):
                found.append((node.lineno, ast.unparse(node)[:80]))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = node.args
            probe = node.func.id == "hasattr" or (node.func.id == "getattr" and len(args) == 3)
            if (
                probe
                and len(args) >= 2
                and isinstance(args[1], ast.Constant)
                and args[1].value in HOOKS
            ):
                found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def test_no_module_outside_the_kinds_branches_on_a_kind():
    names = _kind_names()
    found = [
        f"{relative}:{line}: {code}"
        for relative, path in _python_files()
        for line, code in kind_branches(parse(path.read_text()), names)
    ]
    assert found == []


def test_the_scan_finds_what_it_looks_for():
    names = {"files", "table", "kafka", "delta", "hudi", "job_output", "object_store"}
    for sample in (
        "if connector.kind == ConnectorKind.KAFKA: pass",
        "if kind != ConnectorKind.FILES: pass",
        'if name == "object_store": pass',
        'if source_name(c.kind, c.config) != "table": pass',
        'if kind in ("delta", "hudi"): pass',
        "x = connector.kind in [ConnectorKind.DELTA, ConnectorKind.HUDI]",
        'if hasattr(module, "discover"): pass',
        'derived = getattr(module, "derived", None)',
    ):
        assert kind_branches(parse(sample), names), sample
    for sample in (
        'if sink.get("kind") == "files": pass',  # a sink's kind
        'if sink_kind in ("files", "delta"): pass',
        "if kind not in ConnectorKind.values: pass",  # every kind, not one
        "Connector.objects.filter(kind=ConnectorKind.KAFKA)",  # a query, not a branch
        'getattr(exc, "field", None)',  # not a hook
        "kind_of(connector).discover(connector)",
    ):
        assert kind_branches(parse(sample), names) == [], sample


def test_every_module_of_a_kind_is_inside_its_folder():
    """The scan's exemption covers only the kinds' own folders (and the worker's readers)."""
    names = _kind_names()
    assert _inside_a_kind("inventory/sources/kafka/kind.py", names)
    assert _inside_a_kind("workers/spark/sources/kafka_client.py", names)
    assert not _inside_a_kind("inventory/sources/items.py", names)
    assert not _inside_a_kind("inventory/services/backfill_ranges.py", names)
    assert not _inside_a_kind("workers/spark/sources/registry.py", names)

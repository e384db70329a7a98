"""The fronts take an action through its declaration (inventory/actions.py): no API view, dashboard
view or admin module names a service that an action declares, so what the table says is what runs.
`actions.run` checks the role once more and passes the declaration's fixed arguments."""

import ast
import dataclasses
import inspect
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied

from inventory.actions import ACTIONS, run
from inventory.models import BackfillStatus
from inventory.services import backfills, jobs, lifecycle
from tests.support.python_ast import parse

ROOT = Path(settings.BASE_DIR)
FRONTS = ("inventory/api", "inventory/views", "inventory/admin")


def _declared() -> set[str]:
    """Every dotted path under which a declared service can be reached: where it is defined and
    every loaded Tidemark module that re-exports it (`inventory.services.lifecycle.batch_retry`)."""
    services = {id(a.service): a.service for a in ACTIONS.values()}
    paths = {f"{f.__module__}.{f.__qualname__}" for f in services.values()}
    for name, module in list(sys.modules.items()):
        if name.startswith("inventory."):
            for attribute, value in vars(module).items():
                if id(value) in services and value is services[id(value)]:
                    paths.add(f"{name}.{attribute}")
    return paths


def test_an_action_holds_its_service_function_not_a_name():
    for key, action in ACTIONS.items():
        assert callable(action.service) and not isinstance(action.service, str), key
    assert ACTIONS["batch.retry"].service is lifecycle.batch_retry
    assert "inventory.services.lifecycle.batch_retry" in _declared()


def _dotted(node, bound: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in bound:
        return None
    return ".".join([bound[node.id], *reversed(parts)])


def _direct_uses(source: str, declared: set[str]) -> list[str]:
    """The declared services `source` names directly: through a module it imported
    (`from inventory.services import jobs as job_services` ... `job_services.job_create`), a
    function it imported (`from inventory.services.jobs import job_create`), a full dotted path,
    or the path as a string (`import_string("inventory.services.jobs.job_create")`)."""
    tree = parse(source)
    bound: dict[str, str] = {}  # local name -> what it stands for, dotted
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = top
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            path = _dotted(node, bound)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            path = bound.get(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            path = node.value
        else:
            continue
        if path in declared:
            found.append(path)
    return found


@pytest.mark.parametrize(
    "source",
    [
        "from inventory.services import jobs as job_services\n"
        "def f(job):\n    job_services.job_set_paused(job=job, paused=True)\n",
        "from inventory.services.jobs import job_delete\ndef f(job):\n    job_delete(job=job)\n",
        "import inventory.services.lifecycle\n"
        "f = lambda pk: inventory.services.lifecycle.batch_retry(batch_id=pk, actor='')\n",
        "from functools import partial\nfrom inventory.services import connectors\n"
        "pause = partial(connectors.connector_pause, actor='x')\n",
        "from django.utils.module_loading import import_string\n"
        "f = import_string('inventory.services.throttle.throttle_set')\n",
    ],
)
def test_the_check_finds_a_front_naming_a_declared_service(source):
    assert len(_direct_uses(source, _declared())) == 1


def test_the_check_lets_a_front_take_an_action_or_call_an_undeclared_service():
    source = (
        "from inventory.actions import run\n"
        "from inventory.services import gaps as gap_services\n"
        "def f(request, job):\n"
        "    gap_services.holes_preview(job=job)\n"
        "    return run('job.pause', request.user, job=job)\n"
    )
    assert _direct_uses(source, _declared()) == []


def test_no_front_names_a_service_an_action_declares():
    declared = _declared()
    modules = sorted(p for front in FRONTS for p in (ROOT / front).rglob("*.py"))
    assert len(modules) >= 20  # the API, the dashboard and the admin, one module per resource
    direct = {
        str(path.relative_to(ROOT)): uses
        for path in modules
        if (uses := _direct_uses(path.read_text(), declared))
    }
    assert direct == {}, "take these through inventory.actions.run(key, user, ...)"


def test_every_fixed_argument_is_a_parameter_of_its_service():
    for action in ACTIONS.values():
        signature = inspect.signature(action.service)
        signature.bind_partial(**dict(action.fixed))  # TypeError names the stray argument
    assert dict(ACTIONS["job.pause"].fixed) == {"paused": True}


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, **arguments):
        self.calls.append(arguments)
        return "done"


def test_run_refuses_a_user_without_the_role_and_calls_nothing(monkeypatch):
    recorder = _Recorder()
    monkeypatch.setitem(
        ACTIONS, "job.pause", dataclasses.replace(ACTIONS["job.pause"], service=recorder)
    )
    with pytest.raises(PermissionDenied, match="operator"):
        run("job.pause", AnonymousUser(), job="nightly")
    assert recorder.calls == []
    with pytest.raises(KeyError):
        run("job.explode", AnonymousUser())


@pytest.mark.parametrize(
    "key, service, fixed",
    [
        ("job.pause", jobs.job_set_paused, {"paused": True}),
        ("job.resume", jobs.job_set_paused, {"paused": False}),
        ("backfill.pause", backfills.backfill_set_status, {"status": BackfillStatus.PAUSED}),
        ("backfill.resume", backfills.backfill_set_status, {"status": BackfillStatus.RUNNING}),
        ("backfill.cancel", backfills.backfill_set_status, {"status": BackfillStatus.CANCELLED}),
        ("batch.retry", lifecycle.batch_retry, {}),
    ],
)  # fmt: skip
def test_run_calls_the_declared_service_with_the_fixed_and_given_arguments(
    monkeypatch, key, service, fixed
):
    assert ACTIONS[key].service is service
    recorder = _Recorder()
    monkeypatch.setitem(ACTIONS, key, dataclasses.replace(ACTIONS[key], service=recorder))
    admin = User(username="root", is_superuser=True, is_active=True)  # not saved: no query
    assert run(key, admin, target=7) == "done"
    assert recorder.calls == [{**fixed, "target": 7}]

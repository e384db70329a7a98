"""Every action on a dashboard page is offered by the one rule of inventory/actions.py: a user sees
exactly the buttons whose declared role they hold, on the objects the action applies to.

Each page is walked as a viewer, an operator and an admin. A POST form in the page's body names its
action (`data-action="batch.retry"`); the test reads them and compares them with the actions that
apply to the page's objects (their states are set up below) and that the user's role allows."""

import re

import pytest
from django.test import Client

from inventory.actions import ACTIONS, allowed_keys
from inventory.models import Backfill, BackfillStatus, ConnectorState
from inventory.services import jobs as job_services
from inventory.services import lifecycle
from inventory.services.backfills import backfill_create
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db

FORM = re.compile(r"<form\b[^>]*>", re.IGNORECASE)
POST = re.compile(r'\bmethod="post"', re.IGNORECASE)
NAMED = re.compile(r'\bdata-action="([^"]*)"')


def _actions_on(html: str) -> list[str]:
    """The actions of the POST forms in the page's <main> (the header's logout form is not one);
    a POST form without a data-action fails: an action nobody can check is not allowed."""
    main = html.split("<main>", 1)[-1].split("</main>", 1)[0] if "<main>" in html else html
    found = []
    for tag in FORM.findall(main):
        if not POST.search(tag):
            continue
        named = NAMED.search(tag)
        assert named, f"a POST form names no action: {tag}"
        assert named.group(1) in ACTIONS, f"undeclared action {named.group(1)!r}"
        found.append(named.group(1))
    return found


@pytest.fixture
def actions_by_page():
    """A job with a committed, a failed (retry pending), a dead and a running batch; a paused job;
    an active files connector (with a path: discovery applies) and a paused one."""
    source = ConnectorFactory(name="acted-src", config={"path": "/tmp"})
    make_assets(source, [10] * 6)
    job = make_job(connector=source, name="acted", batch_weight=10, max_attempts=2)
    done = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=done.id, attempt=done.attempt)
    failed = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=failed.id, attempt=failed.attempt, error={"message": "once"})
    dead = lifecycle.batch_acquire(job=job, worker="w")
    type(dead).objects.filter(pk=dead.pk).update(max_attempts=1)
    lifecycle.batch_fail(batch_id=dead.id, attempt=dead.attempt, error={"message": "bad file"})
    running = lifecycle.batch_acquire(job=job, worker="w")
    paused_source = ConnectorFactory(name="held-src", state=ConnectorState.PAUSED)
    idle = make_job(connector=paused_source, name="idle", batch_weight=10)
    job_services.job_set_paused(job=idle, paused=True)
    # a running backfill over the committed batch's items
    backfill = backfill_create(
        job=job, range_start=done.span.lower, range_end=done.span.upper - 1, actor="t"
    )
    Backfill.objects.filter(pk=backfill.pk).update(status=BackfillStatus.RUNNING)
    statuses = {
        b.pk: b.status for b in type(dead).objects.filter(pk__in=[failed.pk, dead.pk, running.pk])
    }
    assert statuses == {failed.pk: "failed", dead.pk: "dead", running.pk: "running"}
    # page -> the actions that apply to its objects in these states, whoever looks
    return {
        "/": set(),
        "/jobs/acted/": {"job.run", "job.pause"},
        "/jobs/idle/": {"job.run", "job.resume"},
        "/jobs/acted/batches/": set(),
        "/jobs/acted/gaps/": {"job.backfill_holes"},  # the dead batch's range is a hole
        "/connectors/": {"connector.pause", "connector.discover", "connector.resume"},
        f"/batches/{done.pk}/": set(),
        f"/batches/{failed.pk}/": {"batch.retry", "batch.cancel"},
        f"/batches/{dead.pk}/": {"batch.retry", "batch.skip"},
        f"/batches/{running.pk}/": {"batch.cancel"},
        "/backfills/": {
            "job.backfill",
            "backfill.pause",
            "backfill.cancel",
            "throttle.set",
            "throttle.pin",
        },
    }


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_each_page_offers_exactly_the_actions_the_role_allows(actions_by_page, role_users, role):
    user = role_users[role]
    client = Client()
    client.force_login(user)
    may = allowed_keys(user)
    for url, applicable in actions_by_page.items():
        response = client.get(url)
        assert response.status_code == 200, url
        shown = _actions_on(response.content.decode())
        assert len(shown) == len(set(shown)), (url, shown)
        assert set(shown) <= may, (url, role, set(shown) - may)
        assert set(shown) == applicable & may, (url, role, shown)


def test_the_connector_row_an_operator_gets_back_from_htmx_offers_the_next_action(
    actions_by_page, role_users
):
    client = Client()
    client.force_login(role_users["operator"])
    row = client.post("/connectors/acted-src/pause/", HTTP_HX_REQUEST="true").content.decode()
    assert set(_actions_on(row)) == {"connector.resume"}
    assert "paused acted-src" in row

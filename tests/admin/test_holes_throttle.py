"""The admin's gap-report action (backfill the holes, after a preview) and the shared backfill
throttle's editor: both through the same services as the dashboard and the API."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from inventory import admin as inventory_admin
from inventory.actions import ACTIONS
from inventory.models import Backfill, BackfillThrottle, Batch
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:inventory_job_changelist")
THROTTLES = reverse("admin:inventory_backfillthrottle_changelist")
ADD_THROTTLE = reverse("admin:inventory_backfillthrottle_add")


def _action(client, job, **extra):
    data = {"action": "backfill_holes", ACTION_CHECKBOX_NAME: [job.pk], **extra}
    return client.post(JOBS, data)


def test_backfill_the_holes_shows_a_preview_and_creates_nothing(
    gappy, role_users, admin_client_for
):
    job, ids = gappy
    page = _action(admin_client_for(role_users["operator"]), job)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="holes-preview"' in html
    assert f"{ids[1]}–{ids[1]}" in html and f"{ids[3]}–{ids[3]}" in html
    assert 'name="apply"' in html and "csrfmiddlewaretoken" in html
    assert not Backfill.objects.exists()


def test_backfill_the_holes_on_confirmation_backfills_exactly_them(
    gappy, role_users, admin_client_for
):
    job, ids = gappy
    client = admin_client_for(role_users["operator"])
    response = _action(
        client, job, apply="1", max_concurrency=2, priority=5, reason="after the outage"
    )
    assert response.status_code == 302
    spans = sorted((b.span.lower, b.span.upper - 1) for b in Batch.objects.filter(kind="backfill"))
    assert spans == [(ids[1], ids[1]), (ids[3], ids[3])]
    created = list(Backfill.objects.order_by("id"))
    assert {(b.max_concurrency, b.priority, b.reason, b.created_by) for b in created} == {
        (2, 5, "after the outage", "operator-user")
    }
    messages = [str(m) for m in response.wsgi_request._messages]
    assert any("holes backfilled: gappy" in m for m in messages)


def test_backfill_the_holes_within_a_range_previews_that_range_only(
    gappy, role_users, admin_client_for
):
    job, ids = gappy
    client = admin_client_for(role_users["operator"])
    html = _action(
        client, job, preview="1", lower=ids[2], upper=ids[5], max_concurrency=1, priority=0
    ).content.decode()
    assert f"{ids[3]}–{ids[3]}" in html and f"{ids[1]}–{ids[1]}" not in html
    _action(client, job, apply="1", lower=ids[2], upper=ids[5], max_concurrency=1, priority=0)
    assert [b.range_start for b in Backfill.objects.all()] == [ids[3]]


def test_a_job_without_holes_says_so_and_offers_nothing(role_users, admin_client_for):
    connector = ConnectorFactory(name="whole")
    make_assets(connector, [10])
    job = make_job(connector=connector, name="whole", batch_weight=10)
    html = _action(admin_client_for(role_users["operator"]), job).content.decode()
    assert "has no dead, cancelled or never-planned items" in html
    assert 'name="apply"' not in html


def test_a_viewer_cannot_backfill_the_holes(gappy, role_users, admin_client_for):
    job, _ = gappy
    permissions = inventory_admin.JobAdmin.backfill_holes.allowed_permissions
    assert list(permissions) == [
        inventory_admin.ROLE_PERMISSION[ACTIONS["job.backfill_holes"].role]
    ]
    client = admin_client_for(role_users["viewer"])
    changelist = client.get(JOBS).content.decode()
    assert "backfill_holes" not in changelist
    _action(client, job, apply="1", max_concurrency=1, priority=0)
    assert not Backfill.objects.exists()


def test_an_operator_sets_changes_and_removes_the_shared_throttle(role_users, admin_client_for):
    connector = ConnectorFactory(name="orders")
    client = admin_client_for(role_users["operator"])
    assert client.post(ADD_THROTTLE, {"weight_per_minute": 500}).status_code == 302
    assert (
        client.post(ADD_THROTTLE, {"connector": connector.pk, "weight_per_minute": 100}).status_code
        == 302
    )
    assert {(t.connector_id, t.weight_per_minute) for t in BackfillThrottle.objects.all()} == {
        (None, 500),
        (connector.pk, 100),
    }
    listing = client.get(THROTTLES).content.decode()
    assert "all connectors" in listing and "orders" in listing

    per_connector = BackfillThrottle.objects.get(connector=connector)
    change = reverse("admin:inventory_backfillthrottle_change", args=[per_connector.pk])
    assert client.post(change, {"weight_per_minute": 150}).status_code == 302
    # the scope stays: only the per-connector budget changed
    assert {(t.connector_id, t.weight_per_minute) for t in BackfillThrottle.objects.all()} == {
        (None, 500),
        (connector.pk, 150),
    }
    delete = reverse("admin:inventory_backfillthrottle_delete", args=[per_connector.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert list(BackfillThrottle.objects.values_list("connector_id", flat=True)) == [None]


def test_a_throttle_of_zero_is_refused_on_its_field(role_users, admin_client_for):
    client = admin_client_for(role_users["operator"])
    page = client.post(ADD_THROTTLE, {"weight_per_minute": 0})
    assert page.status_code == 200 and "errorlist" in page.content.decode()
    assert not BackfillThrottle.objects.exists()


def test_a_viewer_sees_the_throttle_but_cannot_change_it(role_users, admin_client_for):
    throttle = BackfillThrottle.objects.create(connector=None, weight_per_minute=300)
    client = admin_client_for(role_users["viewer"])
    assert client.get(THROTTLES).status_code == 200
    assert client.get(ADD_THROTTLE).status_code == 403
    change = reverse("admin:inventory_backfillthrottle_change", args=[throttle.pk])
    client.post(change, {"weight_per_minute": 1})
    throttle.refresh_from_db()
    assert throttle.weight_per_minute == 300


def test_backfill_the_holes_within_a_time_range_resolves_it_per_job(
    gappy, role_users, admin_client_for
):
    from datetime import UTC, datetime, timedelta

    from inventory.models import Asset

    job, ids = gappy
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    for hours, pk in enumerate(ids):  # files registered an hour apart
        Asset.objects.filter(pk=pk).update(discovered_at=t0 + timedelta(hours=hours))
    client = admin_client_for(role_users["operator"])
    times = {
        "time_start": (t0 + timedelta(hours=2)).isoformat(),
        "time_end": (t0 + timedelta(hours=4)).isoformat(),
    }
    html = _action(client, job, preview="1", max_concurrency=1, priority=0, **times)
    html = html.content.decode()
    assert f"{ids[3]}–{ids[3]}" in html and f"{ids[1]}–{ids[1]}" not in html
    naive = {**times, "time_start": "2026-03-01T02:00:00"}
    refused = _action(client, job, preview="1", max_concurrency=1, priority=0, **naive)
    assert "no UTC offset" in refused.content.decode()
    _action(client, job, apply="1", max_concurrency=1, priority=0, **times)
    assert [b.range_start for b in Backfill.objects.all()] == [ids[3]]

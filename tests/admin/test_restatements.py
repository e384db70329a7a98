"""The admin: the holes backfill runs the plan its preview showed (or shows it as it is now), and
proposed replays are applied with their pinned plans by operators."""

import re

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from inventory.models import Asset, Backfill, Restatement
from inventory.services import lifecycle, restatements
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:inventory_job_changelist")
RESTATEMENTS = reverse("admin:inventory_restatement_changelist")


def test_the_holes_backfill_runs_the_previewed_plan_or_shows_it_as_it_is_now(
    gappy,
    role_users,
    admin_client_for,
):
    job, ids = gappy
    client = admin_client_for(role_users["operator"])
    form = {"action": "backfill_holes", ACTION_CHECKBOX_NAME: [job.pk]}
    html = client.post(JOBS, form).content.decode()
    pinned = re.search(rf'name="fingerprint_{job.pk}" value="([0-9a-f]{{16}})"', html).group(1)
    # the dead batch's file is now heavier: the plan previewed is not the plan any more
    Asset.objects.filter(pk=ids[1]).update(weight=25)
    apply = {**form, "apply": "1", "max_concurrency": 1, "priority": 0}
    refused = client.post(JOBS, {**apply, f"fingerprint_{job.pk}": pinned})
    assert refused.status_code == 200 and not Backfill.objects.exists()
    page = refused.content.decode()
    assert "the holes changed since they were previewed" in page
    now = re.search(rf'name="fingerprint_{job.pk}" value="([0-9a-f]{{16}})"', page).group(1)
    assert now != pinned
    done = client.post(JOBS, {**apply, f"fingerprint_{job.pk}": now})
    assert done.status_code == 302
    assert sorted(b.range_start for b in Backfill.objects.all()) == [ids[1], ids[3]]


def test_an_operator_applies_proposed_replays_from_the_admin(role_users, admin_client_for):
    connector = ConnectorFactory(name="admin-restated")
    make_assets(connector, [10] * 4)
    job = make_job(
        connector=connector, name="admin-restated", batch_weight=20, restatements="proposed"
    )
    while (batch := lifecycle.batch_acquire(job=job, worker="app")) is not None:
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    ids = list(connector.assets.order_by("id").values_list("id", flat=True))
    restatements.restate_items(connector, ids[:2], reason="late", cause="changed_files")
    record = Restatement.objects.get(job=job)
    action = {"action": "apply_restatements", ACTION_CHECKBOX_NAME: [record.pk]}
    viewer = admin_client_for(role_users["viewer"])
    listed = viewer.get(RESTATEMENTS).content.decode()
    assert f"{ids[0]}" in listed and "apply_restatements" not in listed
    viewer.post(RESTATEMENTS, action)
    assert not Backfill.objects.exists()
    response = admin_client_for(role_users["operator"]).post(RESTATEMENTS, action)
    assert response.status_code == 302
    record.refresh_from_db()
    assert record.state == "rebuilding" and record.backfill.created_by == "operator-user"

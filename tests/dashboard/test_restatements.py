"""The dashboard's share of restatements and pinned plans: restated ranges beside the holes (gap
report, job page), proposed replays applied or dismissed from the job page, and a backfill form
that schedules exactly the plan it previewed or shows how it changed."""

import re

import pytest
from django.test import Client

from inventory.models import Backfill, Restatement
from inventory.services import lifecycle, restatements
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


def _client(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def job():
    connector = ConnectorFactory(name="orders")
    make_assets(connector, [30] * 6)
    return make_job(
        connector=connector, name="orders-hourly", batch_weight=60, max_items=2,
        restatements="proposed",
    )  # fmt: skip


def _commit_all(job):
    while (batch := lifecycle.batch_acquire(job=job, worker="app")) is not None:
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)


def _ids(job) -> list[int]:
    return list(job.connector.assets.order_by("id").values_list("id", flat=True))


def test_the_gap_report_and_job_page_show_restated_ranges_beside_holes(job, role_users):
    ids = _ids(job)
    job.max_attempts = 1
    job.save(update_fields=["max_attempts"])
    for _ in range(2):
        batch = lifecycle.batch_acquire(job=job, worker="app")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    last = lifecycle.batch_acquire(job=job, worker="app")
    lifecycle.batch_fail(batch_id=last.pk, attempt=last.attempt, error={"message": "x"})  # dead
    restatements.restate_items(
        job.connector, ids[0:2], reason="files changed after registration: x", cause="changed_files"
    )
    record = Restatement.objects.get(job=job)
    viewer = _client(role_users["viewer"])
    gaps = viewer.get("/jobs/orders-hourly/gaps/").content.decode()
    assert 'data-state="dead"' in gaps  # the hole
    row = re.search(
        rf'<tr id="restatement-{record.pk}" data-state="proposed">(.*?)</tr>', gaps, re.S
    )
    assert row and f"{ids[0]}–{ids[1]}" in row.group(1)
    assert 'class="restated-strip"' in gaps and 'class="restated-proposed"' in gaps
    page = viewer.get("/jobs/orders-hourly/").content.decode()
    assert 'class="restated-proposed"' in page and f'id="restatement-{record.pk}"' in page
    assert "Apply the replay" not in page  # a viewer sees, an operator applies
    assert (
        "Apply the replay"
        in _client(role_users["operator"]).get("/jobs/orders-hourly/").content.decode()
    )


def test_an_operator_applies_a_proposed_replay_from_the_job_page(job, role_users):
    _commit_all(job)
    ids = _ids(job)
    restatements.restate_items(job.connector, ids[:2], reason="late", cause="changed_files")
    record = Restatement.objects.get(job=job)
    url = f"/jobs/orders-hourly/restatements/{record.pk}/apply/"
    fingerprint = {"fingerprint": record.preview["fingerprint"]}
    assert _client(role_users["viewer"]).post(url, fingerprint).status_code == 403
    # the plan changes before the operator clicks: the page shows how, and creates nothing
    job.connector.assets.filter(pk=ids[1]).update(weight=45)
    operator = _client(role_users["operator"])
    changed = operator.post(url, fingerprint)
    assert changed.status_code == 409 and not Backfill.objects.exists()
    page = changed.content.decode()
    now = re.search(r'name="fingerprint" value="([0-9a-f]{16})"', page).group(1)
    assert now != fingerprint["fingerprint"] and "the plan changed" in page
    assert operator.post(url, {"fingerprint": now}).status_code == 302
    record.refresh_from_db()
    assert record.state == "rebuilding" and record.backfill.created_by == "operator-user"


def test_the_backfill_form_schedules_the_previewed_plan_or_shows_how_it_changed(job, role_users):
    ids = _ids(job)
    client = _client(role_users["operator"])
    form = {
        "job": "orders-hourly",
        "range_start": ids[0],
        "range_end": ids[0] + 100,
        "max_concurrency": 1,
        "priority": 0,
    }
    preview = client.post("/backfills/preview/", form).content.decode()
    pinned = re.search(r'id="fingerprint" value="([0-9a-f]{16})" hx-swap-oob', preview).group(1)
    previewed = re.search(r'id="previewed" value="([^"]+)"', preview).group(1)
    assert "6 items" in previewed
    # two more files land inside the range between the preview and the submit
    make_assets(job.connector, [30, 30])
    page = client.post("/backfills/", {**form, "fingerprint": pinned, "previewed": previewed})
    text = page.content.decode()
    assert "The plan changed since the preview" in text and "8 items" in text
    assert not Backfill.objects.exists()
    now = re.search(r'name="fingerprint" id="fingerprint" value="([0-9a-f]{16})"', text).group(1)
    assert now != pinned
    done = client.post("/backfills/", {**form, "fingerprint": now})
    assert done.status_code == 302
    assert Backfill.objects.get().batches.count() == 4


def test_the_job_form_offers_the_restatement_policy(job, role_users):
    page = _client(role_users["admin"]).get("/jobs/orders-hourly/edit/").content.decode()
    select = re.search(r'<select name="restatements"[^>]*>(.*?)</select>', page, re.S)
    assert select, "the job form has no restatements field"
    assert re.search(r'<option value="proposed" selected>', select.group(1))
    assert '<option value="automatic">' in select.group(1)

"""The dashboard: login everywhere, roles for changes, CSRF on forms, the same services underneath."""

import pytest
from django.test import Client

from inventory.models import BackfillStatus, BatchStatus, ConnectorState
from inventory.services import lifecycle
from inventory.services.errors import Conflict
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


def _client(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def job():
    connector = ConnectorFactory(name="orders")
    make_assets(connector, [30, 30, 30, 30, 30])
    return make_job(connector=connector, name="orders-hourly", batch_weight=60, max_items=5)


@pytest.mark.parametrize(
    "url",
    ["/", "/jobs/orders-hourly/", "/connectors/", "/backfills/", "/jobs/orders-hourly/batches/"],
)
def test_every_page_needs_a_login(job, url):
    response = Client().get(url)
    assert response.status_code == 302
    assert response.url.startswith("/accounts/login/")


def test_the_overview_shows_watermark_lag_and_a_dead_batch_holding_it(job, role_users):
    job.max_attempts = 1
    job.save()
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=batch.id, attempt=batch.attempt, error={"message": "boom"})
    page = _client(role_users["viewer"]).get("/").content.decode()
    assert "orders-hourly" in page
    assert "1 dead: watermark held" in page
    # nothing committed: all five items (150 bytes of files) are lag
    assert '5 items<br><span class="muted">weight 150 B</span>' in page


def test_the_job_page_names_the_batch_the_watermark_waits_for(job, role_users):
    first = lifecycle.batch_acquire(job=job, worker="w")
    second = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=second.id, attempt=second.attempt)
    page = _client(role_users["viewer"]).get("/jobs/orders-hourly/").content.decode()
    assert f"batch {first.id}</a>" in page
    assert "running" in page


def test_a_viewer_cannot_pause_a_connector_but_an_operator_can(job, role_users):
    url = "/connectors/orders/pause/"
    assert _client(role_users["viewer"]).post(url).status_code == 403
    job.connector.refresh_from_db()
    assert job.connector.state == ConnectorState.ACTIVE

    response = _client(role_users["operator"]).post(url)
    assert response.status_code == 302
    job.connector.refresh_from_db()
    assert job.connector.state == ConnectorState.PAUSED


def test_forms_refuse_a_post_without_the_csrf_token(job, role_users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_users["operator"])
    assert client.post("/connectors/orders/pause/").status_code == 403
    job.connector.refresh_from_db()
    assert job.connector.state == ConnectorState.ACTIVE


def test_the_backfill_preview_shows_the_plan_without_creating_it(job, role_users):
    client = _client(role_users["operator"])
    first_id = job.connector.assets.order_by("id").first().id
    response = client.post(
        "/backfills/preview/",
        {
            "job": "orders-hourly",
            "range_start": first_id,
            "range_end": first_id + 4,
            "max_concurrency": 1,
            "priority": 0,
        },
    )
    page = response.content.decode()
    assert "3 batch(es), 5 items, total weight 150 B" in page
    assert job.backfills.count() == 0


def test_a_backfill_over_an_empty_range_is_refused_with_the_field(job, role_users):
    response = _client(role_users["operator"]).post(
        "/backfills/",
        {
            "job": "orders-hourly",
            "range_start": 10,
            "range_end": 5,
            "max_concurrency": 1,
            "priority": 0,
        },
    )
    assert response.status_code == 200
    assert "the range is empty" in response.content.decode()
    assert job.backfills.count() == 0


def test_an_operator_schedules_and_pauses_a_backfill(job, role_users):
    client = _client(role_users["operator"])
    first_id = job.connector.assets.order_by("id").first().id
    response = client.post(
        "/backfills/",
        {
            "job": "orders-hourly",
            "range_start": first_id,
            "range_end": first_id + 4,
            "max_concurrency": 2,
            "priority": 1,
            "reason": "reprocess",
        },
    )
    assert response.status_code == 302
    backfill = job.backfills.get()
    assert (backfill.created_by, backfill.batches.count()) == ("operator-user", 3)
    client.post(f"/backfills/{backfill.pk}/pause/")
    backfill.refresh_from_db()
    assert backfill.status == BackfillStatus.PAUSED


def test_skipping_a_dead_batch_needs_an_admin_and_a_reason(job, role_users):
    job.max_attempts = 1
    job.save()
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=batch.id, attempt=batch.attempt, error={"message": "bad file"})

    url = f"/batches/{batch.id}/skip/"
    assert _client(role_users["operator"]).post(url, {"reason": "x"}).status_code == 403
    admin = _client(role_users["admin"])
    admin.post(url, {"reason": ""})
    batch.refresh_from_db()
    assert batch.status == BatchStatus.DEAD
    admin.post(url, {"reason": "file is corrupt upstream"})
    batch.refresh_from_db()
    assert batch.status == BatchStatus.SKIPPED
    page = admin.get(f"/batches/{batch.id}/").content.decode()
    assert "file is corrupt upstream" in page and "bad file" in page


def test_an_operator_pauses_and_resumes_a_job_and_a_paused_job_hands_out_nothing(job, role_users):
    client = _client(role_users["operator"])
    assert _client(role_users["viewer"]).post("/jobs/orders-hourly/pause/").status_code == 403
    client.post("/jobs/orders-hourly/pause/")
    job.refresh_from_db()
    assert job.paused
    with pytest.raises(Conflict):
        lifecycle.batch_acquire(job=job, worker="w")
    client.post("/jobs/orders-hourly/resume/")
    job.refresh_from_db()
    assert not job.paused and lifecycle.batch_acquire(job=job, worker="w") is not None


def test_the_overview_says_when_the_reaper_is_overdue(job, role_users):
    from django.utils import timezone

    from inventory.models import MaintenanceRun
    from inventory.services import scheduling

    viewer = _client(role_users["viewer"])
    assert "The lease reaper has never run" in viewer.get("/").content.decode()
    scheduling.leases_reap()
    page = viewer.get("/").content.decode()
    assert "Lease reaper last ran" in page and "never run" not in page
    MaintenanceRun.objects.filter(name=scheduling.REAPER).update(
        last_run_at=timezone.now() - timezone.timedelta(minutes=10)
    )
    page = viewer.get("/").content.decode()
    assert "The lease reaper last ran 10 min" in page and "is celery beat running" in page


def test_favicon_ico_is_served():
    response = Client().get("/favicon.ico", follow=True)
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    assert body[:4] == b"\x00\x00\x01\x00"  # an icon file, not a page


def test_the_admin_calls_them_batches(role_users):
    page = _client(role_users["admin"]).get("/admin/").content.decode()
    assert "Batches" in page and "Batchs" not in page


def test_a_batch_shows_the_ids_of_its_items_not_where_its_span_starts(role_users):
    connector = ConnectorFactory(name="ranged")
    assets = make_assets(connector, [10] * 8)
    job = make_job(connector=connector, name="ranged-job", batch_weight=30, max_items=3)
    job.start_position = 0
    job.save(update_fields=["start_position"])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    assert batch.span.lower < assets[0].id  # the span starts before the first item
    client = _client(role_users["viewer"])
    page = client.get(f"/batches/{batch.id}/").content.decode()
    assert f"ids {assets[0].id}–{assets[2].id}:" in page
    table = client.get("/jobs/ranged-job/batches/").content.decode()
    assert f"<td>{assets[0].id}–{assets[2].id}</td>" in table


def test_a_small_backfills_estimated_duration_follows_the_jobs_batch_times(job, role_users):
    from datetime import timedelta

    from inventory.models import Batch

    for _ in range(2):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    done = Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED)
    for batch in done:  # each took 4 s
        Batch.objects.filter(pk=batch.pk).update(
            started_at=batch.finished_at - timedelta(seconds=4)
        )
    first, last = job.connector.assets.order_by("id").values_list("id", flat=True)[::4]
    form = {"job": job.name, "by": "ids", "range_start": first, "range_end": last}
    client = _client(role_users["operator"])
    page = client.post("/backfills/preview/", {**form, "max_concurrency": 1, "priority": 0})
    text = page.content.decode()
    # 3 batches of 60 weight one after the other: 3 waves of the 4 s a batch takes
    assert "3 batch(es), 5 items" in text
    assert "Estimated duration about 12 s" in text
    page = client.post("/backfills/preview/", {**form, "max_concurrency": 3, "priority": 0})
    assert "Estimated duration about 4 s" in page.content.decode()


def test_a_state_says_what_it_means_on_hover_and_an_idle_sparkline_says_no_data_yet(
    job, role_users
):
    job.max_attempts = 1
    job.save()
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=batch.id, attempt=batch.attempt, error={"message": "boom"})
    client = _client(role_users["viewer"])
    page = client.get(f"/batches/{batch.id}/").content.decode()
    assert 'title="every attempt failed: the watermark stops in front of it' in page
    overview = client.get("/").content.decode()
    assert 'title="a dead batch holds the watermark: retry or skip it">blocked<' in overview
    assert "no data yet" in overview  # nothing committed in the last day: no empty box

"""/metrics: Prometheus text from the inventory, behind a scrape token or a login."""

import gc

import pytest
from django.core.cache import cache
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from inventory.services import lifecycle as batches
from tests.api_support import make_inventory, token_client

pytestmark = pytest.mark.django_db


def _samples(text: str) -> dict:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@override_settings(METRICS_TOKEN="scrape-me")
def test_metrics_report_batches_watermark_lag_and_attempts(client):
    _, job = make_inventory(weights=[40] * 6)
    done = batches.batch_acquire(job=job, worker="w")
    batches.batch_succeed(batch_id=done.pk, attempt=done.attempt)
    batches.batch_acquire(job=job, worker="w")

    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me")
    assert response.status_code == 200
    samples = _samples(response.content.decode())
    name = (("job", job.name),)
    assert samples[("tidemark_watermark_position", name)] == done.span.upper
    assert samples[("tidemark_lag_items", name)] == 4
    assert samples[("tidemark_lag_weight", name)] == 160
    assert samples[("tidemark_watermark_blocked", name)] == 0
    by_status = (("job", job.name), ("kind", "incremental"), ("status", "running"))
    assert samples[("tidemark_batches", by_status)] == 1
    assert samples[("tidemark_batch_attempts_started_total", name)] == 2
    succeeded = (("job", job.name), ("outcome", "succeeded"))
    assert samples[("tidemark_batch_attempts_finished_total", succeeded)] == 1


@override_settings(METRICS_TOKEN="scrape-me")
def test_metrics_need_the_scrape_token_or_a_login(client, role_users):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert token_client(role_users["viewer"]).get("/metrics").status_code == 200
    assert token_client(role_users["norole"]).get("/metrics").status_code == 401
    client.force_login(role_users["viewer"])
    assert client.get("/metrics").status_code == 200


@override_settings(METRICS_TOKEN="")
def test_without_a_scrape_token_a_bearer_header_opens_nothing(client):
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


@override_settings(METRICS_TOKEN="scrape-me")
def test_metrics_show_when_the_reaper_last_ran_and_whether_it_is_overdue(client):
    from django.utils import timezone

    from inventory.models import MaintenanceRun
    from inventory.services import scheduling

    never = _samples(client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode())
    assert never[("tidemark_reaper_overdue", ())] == 1
    assert ("tidemark_reaper_last_run_timestamp_seconds", ()) not in never

    scheduling.leases_reap()
    ran = _samples(client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode())
    assert ran[("tidemark_reaper_overdue", ())] == 0
    last = ran[("tidemark_reaper_last_run_timestamp_seconds", ())]
    assert abs(last - timezone.now().timestamp()) < 60

    MaintenanceRun.objects.filter(name=scheduling.REAPER).update(
        last_run_at=timezone.now() - timezone.timedelta(minutes=10)
    )
    late = _samples(client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode())
    assert late[("tidemark_reaper_overdue", ())] == 1


@override_settings(METRICS_TOKEN="scrape-me", METRICS_CACHE_SECONDS=0)
def test_a_render_pauses_the_cycle_collector_and_leaves_it_as_it_found_it(client, monkeypatch):
    from inventory.api import metrics

    seen = []
    render = metrics.render
    monkeypatch.setattr(
        metrics, "render", lambda families: seen.append(gc.isenabled()) or render(families)
    )
    make_inventory(weights=[40] * 2)
    assert gc.isenabled()
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").status_code == 200
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").status_code == 200
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()


def test_the_collected_families_are_written_as_prometheus_client_writes_them():
    from inventory.api.exposition import render, written_by_prometheus_client
    from inventory.api.metrics import InventoryCollector

    _, job = make_inventory(weights=[40] * 4)
    failed = batches.batch_acquire(job=job, worker="w")
    batches.batch_fail(batch_id=failed.pk, attempt=failed.attempt, error="boom")
    batches.batch_acquire(job=job, worker="w")

    families = list(InventoryCollector().collect())
    assert sum(len(family.samples) for family in families) > 10
    assert render(families) == written_by_prometheus_client(families)


@override_settings(METRICS_TOKEN="scrape-me")
def test_open_batches_are_counted_by_job_kind_and_status(client):
    """tidemark_batches (read with each job's row, dashboard.sql: health_all): every open status
    of both kinds, each sample the count of such batches, committed batches in none; a job with
    no open batch has no sample. Fails if a (kind, status) is left out or counted in another's
    column."""
    from datetime import timedelta

    from django.utils import timezone

    from inventory.models import Backfill, Batch, BatchKind, BatchStatus
    from inventory.selectors_health import OPEN_BY_KIND

    open_statuses = [BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED, BatchStatus.DEAD]
    assert set(OPEN_BY_KIND) == {(k, s) for k in BatchKind.values for s in open_statuses}

    _, job = make_inventory(weights=[1])
    _, idle = make_inventory(name="idle", weights=[1])
    backfill = Backfill.objects.create(
        job=job, range_start=0, range_end=10**6, batch_weight=1, max_items=1
    )
    planted, lower = {}, 1000
    for n, (kind, status) in enumerate(OPEN_BY_KIND + (("incremental", "succeeded"),)):
        for _ in range(n + 1):  # a different count for each (kind, status)
            Batch.objects.create(
                job=job,
                kind=kind,
                backfill=backfill if kind == BatchKind.BACKFILL else None,
                status=status,
                span=(lower, lower + 1),
                item_count=1,
                weight=1,
                max_attempts=3,
                lease_expires_at=timezone.now() + timedelta(hours=1),
            )
            lower += 1
        planted[kind, status] = n + 1

    samples = _samples(
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    )
    found = {
        (dict(labels)["kind"], dict(labels)["status"]): value
        for (name, labels), value in samples.items()
        if name == "tidemark_batches" and dict(labels)["job"] == job.name
    }
    del planted["incremental", "succeeded"]
    assert found == planted
    assert not [k for k in samples if k[0] == "tidemark_batches" and ("job", idle.name) in k[1]]


def test_past_the_bad_token_limit_metrics_answer_429_with_when_to_retry(client, settings):
    """The API's brake on guessing tokens covers /metrics too: past the limit of bad tokens from
    an address, 429 with Retry-After (the failure window), whatever the token."""
    settings.TIDEMARK_TOKEN_FAILURE_LIMIT = 2
    settings.TIDEMARK_TOKEN_FAILURE_WINDOW = 90
    cache.clear()
    try:
        bad = [client.get("/metrics", HTTP_AUTHORIZATION="Token nope") for _ in range(3)]
        assert [answer.status_code for answer in bad] == [401, 401, 429]
        assert bad[-1]["Retry-After"] == "90"
    finally:
        cache.clear()


@override_settings(METRICS_TOKEN="scrape-me")
def test_bad_metrics_bearer_tokens_are_counted_and_throttled_as_api_tokens_are(client, settings):
    """Issue 42, item 8: a wrong `Bearer` at /metrics was neither counted nor throttled, so the
    scrape token could be guessed without limit. It now counts with the API's bad tokens for the
    address (one count for both kinds), is recorded for the admin, and past the limit the right
    bearer gets 429 too."""
    from axes.models import AccessFailureLog

    settings.TIDEMARK_TOKEN_FAILURE_LIMIT = 3
    settings.TIDEMARK_TOKEN_FAILURE_WINDOW = 90
    cache.clear()
    try:
        here = {"REMOTE_ADDR": "10.8.0.1"}
        bad = [
            client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer guess-{n}", **here).status_code
            for n in range(2)
        ]
        assert bad == [401, 401]
        # an API token guess from the same address counts with them: the limit is reached
        assert (
            client.get("/api/v1/jobs/", HTTP_AUTHORIZATION="Token nope", **here).status_code == 401
        )
        right = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me", **here)
        assert right.status_code == 429
        assert right["Retry-After"] == "90"
        assert b"tidemark_" not in right.content
        recorded = AccessFailureLog.objects.filter(
            username="(metrics token)", ip_address="10.8.0.1"
        )
        assert recorded.count() == 2
        # another address still scrapes
        elsewhere = client.get(
            "/metrics", HTTP_AUTHORIZATION="Bearer scrape-me", REMOTE_ADDR="10.8.0.2"
        )
        assert elsewhere.status_code == 200
    finally:
        cache.clear()

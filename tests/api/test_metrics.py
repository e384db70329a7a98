"""/metrics: Prometheus text from the inventory, behind a scrape token or a login."""

import gc

import pytest
from django.core.cache import cache
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from inventory.services import lifecycle
from tests.support.api_support import make_inventory, token_client

pytestmark = pytest.mark.django_db


def _samples(text: str) -> dict:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _families(text: str) -> dict:
    """family name -> its samples as (name, labels dict, value)."""
    return {
        family.name: [(x.name, x.labels, x.value) for x in family.samples]
        for family in text_string_to_metric_families(text)
    }


def _lag_batches_and_attempts():
    _, job = make_inventory(weights=[40] * 6)
    done = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=done.pk, attempt=done.attempt)
    lifecycle.batch_acquire(job=job, worker="w")
    return job, done


@override_settings(METRICS_TOKEN="scrape-me")
def test_by_default_metrics_report_per_job_only_lag_commits_and_stuck_batches(client):
    """The default contract (docs/api.md, docs/upgrading.md): per job only the lag, the last
    watermark move and failed/dead batches; open batches and attempts summed by kind, status
    and outcome, jobs counted by state, no `job` label anywhere else."""
    from inventory.api.metrics import FULL_ONLY_FAMILIES, PER_JOB_FAMILIES

    job, _ = _lag_batches_and_attempts()
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me")
    assert response.status_code == 200
    samples = _samples(response.content.decode())
    name = (("job", job.name),)
    assert samples[("tidemark_lag_items", name)] == 4
    assert ("tidemark_watermark_updated_timestamp_seconds", name) in samples
    running = (("kind", "incremental"), ("status", "running"))
    assert samples[("tidemark_batches", running)] == 1
    assert samples[("tidemark_batch_attempts_started_total", ())] == 2
    assert samples[("tidemark_batch_attempts_finished_total", (("outcome", "succeeded"),))] == 1
    assert samples[("tidemark_jobs", (("state", "catching_up"),))] == 1
    assert samples[("tidemark_jobs", (("state", "blocked"),))] == 0
    # the families of before that `full` brings back are not written
    for gone in FULL_ONLY_FAMILIES:
        assert not [key for key in samples if key[0] == gone]
    families = _families(response.content.decode())
    with_job = {f for f, rows in families.items() if any("job" in labels for _, labels, _ in rows)}
    assert with_job and with_job <= set(PER_JOB_FAMILIES)
    # alerts counted by kind and severity (the reaper never ran here), none named
    assert samples[("tidemark_alerts", (("kind", "reaper_overdue"), ("severity", "critical")))] == 1
    assert samples[("tidemark_alerts", (("kind", "dead_batches"), ("severity", "critical")))] == 0
    assert not [f for f, rows in families.items() if any("subject" in x[1] for x in rows)]


@override_settings(METRICS_TOKEN="scrape-me", METRICS_PER_JOB="full")
def test_with_the_full_setting_metrics_report_every_per_job_family(client):
    job, done = _lag_batches_and_attempts()
    samples = _samples(
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    )
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
    assert samples[("tidemark_jobs", (("state", "catching_up"),))] == 1
    # one series per alert, beside the counts by kind (the reaper never ran here)
    reaper = (("kind", "reaper_overdue"), ("severity", "critical"), ("subject", ""))
    assert samples[("tidemark_alert", reaper)] == 1
    assert samples[("tidemark_alerts", reaper[:2])] == 1


@override_settings(METRICS_TOKEN="scrape-me")
def test_a_job_s_failed_and_dead_batches_are_its_own_series_where_it_has_any(client):
    from inventory.models import Batch, BatchStatus

    _, job = make_inventory(weights=[40] * 6, max_items=1)
    _, quiet = make_inventory(name="quiet", weights=[40])
    failed = lifecycle.batch_acquire(job=job, worker="w")
    dead = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=failed.pk, attempt=failed.attempt, error="boom")
    Batch.objects.filter(pk=dead.pk).update(status=BatchStatus.DEAD)

    samples = _samples(
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    )
    of = {
        dict(labels)["job"]: dict(labels)["status"]
        for (name, labels), _ in samples.items()
        if name == "tidemark_job_open_batches"
    }
    assert samples[("tidemark_job_open_batches", (("job", job.name), ("status", "failed")))] == 1
    assert samples[("tidemark_job_open_batches", (("job", job.name), ("status", "dead")))] == 1
    assert quiet.name not in of
    assert samples[("tidemark_jobs", (("state", "blocked"),))] == 1
    assert samples[("tidemark_batches", (("kind", "incremental"), ("status", "dead")))] == 1


@override_settings(METRICS_TOKEN="scrape-me")
def test_a_scrape_of_300_alerting_jobs_writes_at_most_five_samples_a_job(client, settings):
    """The contract's bound: at 10,000 jobs a scrape stays under 50,000 samples. 300 jobs with
    datetime watermarks (the one kind with a lag in seconds) and a lag each, every one with a
    failed and a dead batch, so every one is a `dead_batches` alert: at most 5 samples a job plus
    a fixed number, and no job named outside the per-job families (the alerts were written one
    per job before). `full` writes more, the alert of each job among them."""
    from datetime import timedelta

    from django.utils import timezone

    from inventory.api.metrics import PER_JOB_FAMILIES
    from inventory.models import Batch, BatchStatus, Job, Watermark
    from tests.support.factories import many_jobs

    connector, _ = make_inventory(name="first", weights=[40] * 3)
    jobs = many_jobs(connector, 300)
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(watermark_type="datetime")
    Watermark.objects.filter(job__in=jobs).update(
        type="datetime", value=(timezone.now() - timedelta(hours=1)).isoformat()
    )
    Batch.objects.bulk_create(
        [
            Batch(
                job=job,
                kind="incremental",
                status=status,
                span=(i, i + 1),
                item_count=1,
                weight=1,
                max_attempts=3,
                lease_expires_at=timezone.now(),
            )
            for job in jobs
            for i, status in enumerate((BatchStatus.FAILED, BatchStatus.DEAD))
        ]
    )

    def scrape() -> dict:
        text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
        return _families(text)

    lean = scrape()
    n_jobs = Job.objects.count()
    total = sum(map(len, lean.values()))
    naming = {
        name
        for name, rows in lean.items()
        if any("job" in labels or "subject" in labels for _, labels, _ in rows)
    }
    per_job = sum(len(lean[name]) for name in naming)
    # every job has its lag in items, its last move and both stuck batches (the lag in seconds
    # too where its datetime value reads): the most a job writes
    assert len(lean["tidemark_lag_items"]) == n_jobs
    assert len(lean["tidemark_watermark_updated_timestamp_seconds"]) == n_jobs
    assert len(lean["tidemark_lag_seconds"]) <= 300
    assert len(lean["tidemark_job_open_batches"]) == 600
    assert naming <= set(PER_JOB_FAMILIES)
    assert per_job <= 5 * n_jobs
    # the fixed part: jobs by state, batches by kind and status, attempts, reaper, alerts by kind
    assert total - per_job <= 40
    assert total <= 5 * n_jobs + 40
    assert "tidemark_alert" not in lean
    dead = {"kind": "dead_batches", "severity": "critical"}
    assert [value for _, labels, value in lean["tidemark_alerts"] if labels == dead] == [300]

    settings.METRICS_PER_JOB = "full"
    full = scrape()
    assert sum(map(len, full.values())) > total + 3 * 300
    alerted = {labels["subject"] for _, labels, _ in full["tidemark_alert"]}
    assert {job.name for job in jobs} <= alerted


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


DEFAULT_FAMILIES = {
    "tidemark_jobs",
    "tidemark_batches",
    "tidemark_batch_attempts_started",
    "tidemark_batch_attempts_finished",
    "tidemark_lag_items",
    "tidemark_lag_seconds",
    "tidemark_watermark_updated_timestamp_seconds",
    "tidemark_job_open_batches",
    "tidemark_retention_margin_seconds",
    "tidemark_reaper_last_run_timestamp_seconds",
    "tidemark_reaper_overdue",
    "tidemark_alerts",
}


@override_settings(METRICS_TOKEN="scrape-me", METRICS_CACHE_SECONDS=0)
def test_a_scrape_grows_by_the_per_job_families_only_at_most_five_samples_a_job(client):
    """At N jobs and again at 3N: the same families, the samples outside the per-job families the
    same number (the constant), and the whole scrape within 5 * N + that constant."""
    from inventory.api.metrics import PER_JOB_FAMILIES
    from inventory.models import Batch, BatchStatus, Job
    from tests.support.factories import many_jobs

    connector, _ = make_inventory(name="first", weights=[40] * 3)

    def grow(n: int, prefix: str) -> None:
        jobs = many_jobs(connector, n, prefix=prefix)
        Batch.objects.bulk_create(
            [
                Batch(
                    job=job,
                    kind="incremental",
                    status=status,
                    span=(i, i + 1),
                    item_count=1,
                    weight=1,
                    max_attempts=3,
                )
                for job in jobs
                for i, status in enumerate((BatchStatus.FAILED, BatchStatus.DEAD))
            ]
        )

    def scrape() -> tuple[int, int, int, set]:
        text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
        families = _families(text)
        total = sum(map(len, families.values()))
        per_job = sum(len(families[name]) for name in PER_JOB_FAMILIES if name in families)
        return Job.objects.count(), total, total - per_job, set(families)

    grow(40, "few")
    n, total, fixed, names = scrape()
    grow(80, "more")
    n_more, total_more, fixed_more, names_more = scrape()
    assert (n, n_more) == (41, 121)
    assert names == names_more == DEFAULT_FAMILIES
    assert fixed == fixed_more <= 40
    assert total <= 5 * n + fixed and total_more <= 5 * n_more + fixed
    # every job added: its lag, its last move, its failed and its dead batches
    assert total_more - total >= 4 * 80


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
    """The per-job families are written as lines (exposition.Family.lines): what Prometheus's
    parser reads of the whole body, written again by generate_latest, is the body itself."""
    from datetime import timedelta

    from django.utils import timezone

    from inventory.api.exposition import render, rewritten_by_prometheus_client
    from inventory.api.metrics import InventoryCollector
    from inventory.models import Watermark

    _, job = make_inventory(weights=[40] * 4)
    failed = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(batch_id=failed.pk, attempt=failed.attempt, error="boom")
    lifecycle.batch_acquire(job=job, worker="w")
    _, dated = make_inventory(name="dated", weights=[40] * 2)
    type(dated).objects.filter(pk=dated.pk).update(watermark_type="datetime")
    Watermark.objects.filter(job=dated).update(
        type="datetime", value=(timezone.now() - timedelta(minutes=90)).isoformat()
    )

    for full in (False, True):
        body = render(list(InventoryCollector().collect(full=full)))
        samples = [line for line in body.decode().splitlines() if not line.startswith("#")]
        assert len(samples) > 10
        assert any(line.startswith("tidemark_lag_seconds{") for line in samples)
        assert any(line.startswith("tidemark_job_open_batches{") for line in samples)
        assert rewritten_by_prometheus_client(body) == body


@override_settings(METRICS_TOKEN="scrape-me", METRICS_PER_JOB="full")
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

    # by default the same counts summed over the jobs (health_metrics' first row), one sample
    # per kind and status
    with override_settings(METRICS_PER_JOB="lean", METRICS_CACHE_SECONDS=0):
        text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    summed = {
        (dict(labels)["kind"], dict(labels)["status"]): value
        for (name, labels), value in _samples(text).items()
        if name == "tidemark_batches"
    }
    assert summed == planted


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


@override_settings(METRICS_TOKEN="scrape-me", METRICS_CACHE_SECONDS=0)
def test_the_alerts_counted_by_default_are_the_alerts_named_under_full(client, settings):
    """By default the job alerts are counted as the rows are read (no label per alerting job);
    the counts by kind are those of the series `full` writes one per alert: two jobs with dead
    batches, three with a late watermark (one of them also blocked), the reaper never run."""
    from datetime import timedelta

    from django.utils import timezone

    from inventory.models import Watermark
    from tests.support.factories import ConnectorFactory, make_assets, make_job

    def job(name, **options):
        connector = ConnectorFactory(name=f"src-{name}")
        make_assets(connector, [10] * 2)
        return make_job(connector=connector, name=name, batch_weight=10, **options)

    def kill(job):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_fail(
            batch_id=batch.id, attempt=batch.attempt, error={"type": "E", "message": "x"}
        )

    kill(job("dead-1", max_attempts=1))
    for name in ("late-1", "late-2", "late-dead"):
        late = job(name, schedule_seconds=60, max_attempts=1)
        Watermark.objects.filter(job=late).update(updated_at=timezone.now() - timedelta(hours=1))
    kill(late)  # late-dead: its first batch dead, the next items still late
    Watermark.objects.filter(job=late).update(updated_at=timezone.now() - timedelta(hours=1))

    def scrape() -> dict:
        text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
        return _families(text)

    settings.METRICS_PER_JOB = "full"
    named: dict[str, int] = {}
    for _, labels, _ in scrape()["tidemark_alert"]:
        named[labels["kind"]] = named.get(labels["kind"], 0) + 1
    assert named["dead_batches"] == 2 and named["watermark_late"] == 3
    assert named["reaper_overdue"] == 1

    settings.METRICS_PER_JOB = "lean"
    lean = scrape()
    assert "tidemark_alert" not in lean
    counted = {labels["kind"]: value for _, labels, value in lean["tidemark_alerts"]}
    assert {kind: n for kind, n in counted.items() if n} == named

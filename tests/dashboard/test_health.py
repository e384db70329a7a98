"""Is my data current, and if not, why: alerts (page, API, metrics), the gap report and its one
action, the shared backfill throttle, the attempt rollup, and query counts that do not grow."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from inventory import selectors_alerts, selectors_coverage, selectors_health
from inventory.models import (
    Backfill,
    BackfillThrottle,
    Batch,
    BatchStatus,
    ConnectorState,
    Watermark,
)
from inventory.services import gaps, lifecycle, metrics_rollup, throttle
from tests.support.api_support import token_client
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


def _client(user):
    client = Client()
    client.force_login(user)
    return client


def _samples(text: str) -> dict:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _dead(job):
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(
        batch_id=batch.id,
        attempt=batch.attempt,
        error={"type": "AnalysisException", "message": "unreadable file\nat org.apache..."},
    )
    return Batch.objects.get(pk=batch.pk)


def _done(job):
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    return batch


def _world(n_jobs: int, batches_per_job: int):
    """n_jobs jobs, each with committed batches, one dead batch and one running batch."""
    made = []
    for i in range(n_jobs):
        connector = ConnectorFactory(name=f"src-{n_jobs}-{i}")
        make_assets(connector, [10] * (batches_per_job + 3))
        job = make_job(
            connector=connector, name=f"job-{n_jobs}-{i}", batch_weight=10, max_attempts=1
        )
        for _ in range(batches_per_job):
            _done(job)
        _dead(job)
        lifecycle.batch_acquire(job=job, worker="w")
        made.append(job)
    return made


def _count(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return len(queries)


@override_settings(METRICS_TOKEN="scrape-me")
def test_queries_per_page_do_not_grow_with_jobs_or_batches(role_users):
    client = _client(role_users["admin"])
    small = _world(2, 2)
    small_counts = [(url, _count(client, url)) for url in _urls(small[0])]
    big = _world(8, 6)
    big_counts = [(url, _count(client, url)) for url in _urls(big[0])]
    assert [n for _, n in big_counts] == [n for _, n in small_counts], (small_counts, big_counts)


def _urls(job):
    batch = Batch.objects.filter(job=job).order_by("id").first()
    return [
        "/",
        f"/jobs/{job.name}/",
        f"/jobs/{job.name}/gaps/",
        f"/jobs/{job.name}/batches/",
        "/connectors/",
        "/backfills/",
        f"/batches/{batch.pk}/",
        "/metrics",
        "/api/v1/alerts/",
        "/api/v1/jobs/",
        "/api/v1/batches/",
        "/api/v1/backfills/",
        f"/api/v1/jobs/{job.name}/gaps/",
    ]


@override_settings(METRICS_TOKEN="scrape-me")
def test_a_dead_batch_is_an_alert_on_the_page_in_the_api_and_in_metrics(
    role_users, client, settings
):
    connector = ConnectorFactory(name="orders")
    make_assets(connector, [10] * 4)
    job = make_job(connector=connector, name="orders-hourly", batch_weight=10, max_attempts=1)
    dead = _dead(job)

    page = _client(role_users["viewer"]).get("/").content.decode()
    assert 'data-kind="dead_batches"' in page
    assert f"the watermark waits for batch {dead.pk}" in page

    body = token_client(role_users["viewer"]).get("/api/v1/alerts/").json()
    kinds = {(a["kind"], a["subject"]) for a in body["alerts"]}
    assert ("dead_batches", "orders-hourly") in kinds
    assert ("reaper_overdue", "") in kinds  # the reaper never ran in this test

    # by default counted by kind and severity, no series naming the job
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    samples = _samples(text)
    dead_kind = (("kind", "dead_batches"), ("severity", "critical"))
    assert samples[("tidemark_alerts", dead_kind)] == 1
    assert samples[("tidemark_alerts", (("kind", "reaper_overdue"), ("severity", "critical")))] == 1
    assert (
        samples[("tidemark_alerts", (("kind", "backfill_stalled"), ("severity", "warning")))] == 0
    )
    assert not [key for key in samples if key[0] == "tidemark_alert"]
    assert "orders-hourly" not in "".join(
        line for line in text.splitlines() if line.startswith("tidemark_alert")
    )

    # under `full`, one series per alert as well, naming the job
    settings.METRICS_PER_JOB = "full"
    samples = _samples(
        client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    )
    key = (*dead_kind, ("subject", "orders-hourly"))
    assert samples[("tidemark_alert", key)] == 1
    assert samples[("tidemark_alerts", dead_kind)] == 1


def test_a_late_watermark_a_waiting_connector_and_a_stalled_backfill_are_alerts():
    connector = ConnectorFactory(name="late-src")
    make_assets(connector, [10] * 6)
    job = make_job(connector=connector, name="late", batch_weight=10, schedule_seconds=60)
    # on time: the watermark moved just now
    assert not [a for a in selectors_alerts.alerts() if a.kind == "watermark_late"]
    Watermark.objects.filter(job=job).update(updated_at=timezone.now() - timedelta(hours=1))
    late = [a for a in selectors_alerts.alerts() if a.kind == "watermark_late"]
    assert [a.subject for a in late] == ["late"]
    assert "6 items waiting" in late[0].message

    ConnectorFactory(name="after", state=ConnectorState.WAITING, start_after="late-src")
    waiting = [a for a in selectors_alerts.alerts() if a.kind == "connector_waiting"]
    assert [a.subject for a in waiting] == ["after"]

    first = job.connector.assets.order_by("id").first().id
    from inventory.services.backfills import backfill_create

    backfill = backfill_create(job=job, range_start=first, range_end=first + 1)
    assert not [a for a in selectors_alerts.alerts() if a.kind == "backfill_stalled"]
    Backfill.objects.filter(pk=backfill.pk).update(
        updated_at=timezone.now() - timedelta(minutes=30)
    )
    stalled = [a for a in selectors_alerts.alerts() if a.kind == "backfill_stalled"]
    assert [a.subject for a in stalled] == [str(backfill.pk)]


def test_the_gap_report_finds_cancelled_and_dead_ranges_and_backfills_exactly_them(role_users):
    connector = ConnectorFactory(name="gappy")
    assets = make_assets(connector, [10] * 6)
    job = make_job(connector=connector, name="gappy", batch_weight=10, max_attempts=1)
    ids = [a.id for a in assets]
    _done(job)  # ids[0]
    dead = _dead(job)  # ids[1]: holds its range, the planner goes on after it
    _done(job)  # ids[2]
    cancelled = lifecycle.batch_acquire(job=job, worker="w")  # ids[3]
    lifecycle.batch_cancel(batch_id=cancelled.id, actor="t", reason="test")
    assert (dead.span.lower, cancelled.span.lower) == (ids[1], ids[3])

    gaps_found = selectors_coverage.job_gaps(job=job)
    assert [(g.state, g.lower, g.last) for g in gaps_found] == [
        ("dead", ids[1], ids[1]),
        ("cancelled", ids[3], ids[3]),
    ]
    report = token_client(role_users["viewer"]).get(f"/api/v1/jobs/{job.name}/gaps/").json()
    assert report["holes"] == [
        {"range_start": ids[1], "range_end": ids[1]},
        {"range_start": ids[3], "range_end": ids[3]},
    ]
    # ids[4], ids[5] are after the incremental frontier: not planned yet, not a hole
    strip = selectors_coverage.job_coverage(job=job).segments
    assert strip[-1].state == selectors_coverage.PENDING and strip[-1].items == 2

    viewer = token_client(role_users["viewer"])
    assert viewer.post(f"/api/v1/jobs/{job.name}/gaps/backfill/", {}).status_code == 403
    assert _client(role_users["viewer"]).post(f"/jobs/{job.name}/gaps/backfill/").status_code == 403
    assert not Backfill.objects.exists()

    operator = token_client(role_users["operator"])
    preview = operator.post(
        f"/api/v1/jobs/{job.name}/gaps/backfill/", {"preview": True}, format="json"
    )
    assert preview.status_code == 200 and not Backfill.objects.exists()
    assert [b["total_items"] for b in preview.json()["backfills"]] == [1, 1]
    created = operator.post(f"/api/v1/jobs/{job.name}/gaps/backfill/", {}, format="json")
    assert created.status_code == 201
    spans = sorted((b.span.lower, b.span.upper - 1) for b in Batch.objects.filter(kind="backfill"))
    assert spans == [(ids[1], ids[1]), (ids[3], ids[3])]


def test_a_job_without_holes_has_nothing_to_backfill():
    connector = ConnectorFactory(name="whole")
    make_assets(connector, [10] * 2)
    job = make_job(connector=connector, name="whole", batch_weight=10)
    _done(job)
    _done(job)
    assert selectors_coverage.job_gaps(job=job) == []
    from inventory.services.errors import Conflict

    with pytest.raises(Conflict):
        gaps.holes_backfill(job=job)


def test_the_shared_throttle_admits_backfill_batches_within_the_budget_per_minute():
    connector = ConnectorFactory(name="throttled")
    make_assets(connector, [10] * 8)
    job = make_job(connector=connector, name="throttled", batch_weight=10)
    from inventory.services.backfills import backfill_create

    first = job.connector.assets.order_by("id").first().id
    backfill = backfill_create(job=job, range_start=first, range_end=first + 7, max_concurrency=8)
    candidates = list(backfill.batches.order_by("span").values_list("id", "weight"))
    assert throttle.throttle_admit(backfill=backfill, candidates=candidates) == [
        pk for pk, _ in candidates
    ]  # no budget: all
    throttle.throttle_set(connector=None, weight_per_minute=25)
    assert len(throttle.throttle_admit(backfill=backfill, candidates=candidates)) == 2
    # two batches started this minute use 20 of 25: no room for another 10
    Batch.objects.filter(pk__in=[pk for pk, _ in candidates[:2]]).update(
        status=BatchStatus.RUNNING,
        started_at=timezone.now(),
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    assert throttle.throttle_admit(backfill=backfill, candidates=candidates[2:]) == []
    # a per-connector budget applies too, the tightest wins
    throttle.throttle_set(connector=None, weight_per_minute=None)
    throttle.throttle_set(connector=connector, weight_per_minute=40)
    assert len(throttle.throttle_admit(backfill=backfill, candidates=candidates[2:])) == 2
    assert BackfillThrottle.objects.count() == 1


def _attempt_counters(client) -> dict:
    """/metrics' attempt counters: (metric, job, outcome) -> value."""
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    return {
        (sample.name, sample.labels["job"], sample.labels.get("outcome", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("tidemark_batch_attempts_")
    }


def _attempts_counted_directly() -> dict:
    from inventory.models import BatchAttempt

    counts = {}
    for attempt in BatchAttempt.objects.select_related("batch__job"):
        job = attempt.batch.job.name
        key = ("tidemark_batch_attempts_started_total", job, "")
        counts[key] = counts.get(key, 0) + 1
        if attempt.outcome:
            key = ("tidemark_batch_attempts_finished_total", job, attempt.outcome)
            counts[key] = counts.get(key, 0) + 1
    return counts


def _rollup() -> dict:
    from inventory.models import AttemptRollup

    return {(r.job.name, r.outcome): r.count for r in AttemptRollup.objects.select_related("job")}


def _let_time_pass(hours: int) -> None:
    """As if `hours` passed: every attempt's start and finish and the rollup's time boundary move
    back by that much (past the rollup's settle window), keeping their order."""
    from django.db.models import F

    from inventory.models import BatchAttempt

    shift = timedelta(hours=hours)
    BatchAttempt.objects.update(started_at=F("started_at") - shift)
    BatchAttempt.objects.filter(finished_at__isnull=False).update(
        finished_at=F("finished_at") - shift
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE inventory_maintenancerun SET outcome = jsonb_set(outcome, '{finished_before}', "
            "to_jsonb((outcome->>'finished_before')::timestamptz - %s)) "
            "WHERE name = %s AND outcome ? 'finished_before'",
            [shift, metrics_rollup.ROLLUP],
        )


@override_settings(METRICS_TOKEN="scrape-me", METRICS_PER_JOB="full")
def test_attempt_counters_equal_a_direct_count_across_rollups_with_attempts_running(client):
    from inventory.models import AttemptRollup, BatchAttempt

    connectors = [ConnectorFactory(name=f"rolled-{i}") for i in range(2)]
    jobs = []
    for connector in connectors:
        make_assets(connector, [10] * 8)
        jobs.append(
            make_job(connector=connector, name=connector.name, batch_weight=10, max_attempts=2)
        )
    first, second = jobs
    # first: an attempt that runs across every rollup below, a success, a failure (retry pending)
    old_running = lifecycle.batch_acquire(job=first, worker="w")
    _done(first)
    failing = lifecycle.batch_acquire(job=first, worker="w")
    lifecycle.batch_fail(batch_id=failing.id, attempt=failing.attempt, error={"message": "x"})
    # second: a dead batch, and a running attempt abandoned by a cancel (it never finishes)
    _dead(second)
    abandoned = lifecycle.batch_acquire(job=second, worker="w")
    lifecycle.batch_cancel(batch_id=abandoned.id, actor="op", reason="wrong input")
    assert _attempt_counters(client) == _attempts_counted_directly()
    assert _totals_are_the_sums()

    _let_time_pass(hours=2)
    below_id, finished_before = metrics_rollup.attempt_rollup_advance()
    # the boundaries pass the attempt still running: a scrape no longer counts what precedes it
    running = BatchAttempt.objects.get(batch_id=old_running.id)
    assert running.finished_at is None
    assert below_id > BatchAttempt.objects.order_by("-id").first().id
    finished = BatchAttempt.objects.filter(finished_at__isnull=False)
    assert finished_before > finished.order_by("-finished_at").first().finished_at
    rolled = _rollup()
    assert rolled == {
        ("rolled-0", ""): 3,
        ("rolled-0", "succeeded"): 1,
        ("rolled-0", "failed"): 1,
        ("rolled-1", ""): 2,
        ("rolled-1", "failed"): 1,
    }
    assert _attempt_counters(client) == _attempts_counted_directly()
    assert _totals_are_the_sums()

    # the old attempt finishes after the boundary, new ones start and finish; scrapes stay exact
    lifecycle.batch_succeed(batch_id=old_running.id, attempt=old_running.attempt)
    _done(second)
    assert _attempt_counters(client) == _attempts_counted_directly()
    assert _totals_are_the_sums()
    # an advance within the settle window of these attempts rolls none of them up
    assert metrics_rollup.attempt_rollup_advance()[0] == below_id
    assert _rollup() == rolled
    assert _attempt_counters(client) == _attempts_counted_directly()
    assert _totals_are_the_sums()

    still_running = lifecycle.batch_acquire(job=second, worker="w")
    _let_time_pass(hours=1)
    later_below, later_before = metrics_rollup.attempt_rollup_advance()
    still = BatchAttempt.objects.get(batch_id=still_running.id, number=still_running.attempt)
    assert still.finished_at is None
    assert later_below > still.id and later_before > finished_before
    assert AttemptRollup.objects.get(job=first, outcome="succeeded").count == 2
    assert _attempt_counters(client) == _attempts_counted_directly()
    assert _totals_are_the_sums()


def _totals_are_the_sums() -> bool:
    """selectors_alerts.attempt_totals (/metrics' default counters, summed by the database) is
    attempt_counts (per job) summed by outcome."""
    from inventory import selectors_alerts

    summed: dict[str, int] = {}
    for _, outcome, n in selectors_alerts.attempt_counts():
        summed[outcome or ""] = summed.get(outcome or "", 0) + n
    totals = dict(selectors_alerts.attempt_totals())
    return bool(summed) and summed == totals


@override_settings(METRICS_TOKEN="scrape-me", METRICS_PER_JOB="full")
def test_a_rollup_of_the_old_single_boundary_kind_is_not_read_and_is_rebuilt(client):
    from inventory.models import AttemptRollup, MaintenanceRun

    connector = ConnectorFactory(name="upgraded")
    make_assets(connector, [10] * 3)
    job = make_job(connector=connector, name="upgraded", batch_weight=10, max_attempts=1)
    _done(job)
    _dead(job)
    lifecycle.batch_acquire(job=job, worker="w")
    # what the previous rollup left: one id boundary, rows counting attempts below it
    MaintenanceRun.objects.create(
        name=metrics_rollup.ROLLUP, last_run_at=timezone.now(), outcome={"below_id": 10**9}
    )
    AttemptRollup.objects.create(job=job, outcome="succeeded", count=7)
    assert _attempt_counters(client) == _attempts_counted_directly()
    assert _totals_are_the_sums()
    _let_time_pass(hours=1)
    metrics_rollup.attempt_rollup_advance()
    assert AttemptRollup.objects.get(job=job, outcome="succeeded").count == 1
    assert _attempt_counters(client) == _attempts_counted_directly()
    assert _totals_are_the_sums()


def test_an_operator_sets_the_shared_throttle_through_the_api_and_a_viewer_may_not(role_users):
    ConnectorFactory(name="budgeted")
    url = "/api/v1/backfill-throttle/"
    body = {"connector": "budgeted", "weight_per_minute": 500}
    assert token_client(role_users["viewer"]).put(url, body, format="json").status_code == 403
    response = token_client(role_users["operator"]).put(url, body, format="json")
    assert response.status_code == 200
    shown = token_client(role_users["viewer"]).get(url).json()["throttles"]
    assert shown == [{"scope": "budgeted", "budget": 500, "used": 0, "pct": 0.0}]
    page = _client(role_users["viewer"]).get("/backfills/").content.decode()
    assert "Shared throttle, budgeted: 0 of 500 weight/min" in page


def test_last_day_rates_of_given_jobs_are_those_of_all_jobs():
    """The overview reads the rates of its page's jobs (one index range per job), the API of all
    jobs: both count the same succeeded batches (items, weight) and failed attempts per hour."""
    first, second = _world(n_jobs=2, batches_per_job=2)
    one = selectors_health.jobs_rates(job_ids=[first.pk])
    every = selectors_health.jobs_rates()
    assert set(one) == {first.pk} and set(every) == {first.pk, second.pk}
    rates = one[first.pk]
    assert (rates.succeeded[-1], rates.failed[-1]) == (2, 1)  # in the last hour
    assert (rates.items[-1], rates.weight[-1]) == (2, 20)
    assert sum(rates.succeeded) == 2 and sum(rates.failed) == 1
    for pk in (first.pk, second.pk):
        of_one = selectors_health.jobs_rates(pk)[pk]
        assert (of_one.succeeded, of_one.failed, of_one.items, of_one.weight) == (
            every[pk].succeeded,
            every[pk].failed,
            every[pk].items,
            every[pk].weight,
        )


def test_a_throttle_beyond_bigint_is_a_400_naming_it_not_a_database_error(role_users):
    url = "/api/v1/backfill-throttle/"
    body = {"connector": None, "weight_per_minute": 2**63}
    response = token_client(role_users["operator"]).put(url, body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["weight_per_minute"], response.json()
    assert token_client(role_users["viewer"]).get(url).json()["throttles"] == []

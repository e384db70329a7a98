"""A job's state has one rule (inventory/sql/dashboard.sql: job_health): the counts by state, the
overview's page and filter, the alerts and /metrics read it, and they agree on jobs planted in
every state; the alerts API pages them, the critical first."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inventory import selectors, selectors_alerts, selectors_health
from inventory.models import Connector, ConnectorState, Job, Watermark
from inventory.services import lifecycle
from tests.support.api_support import token_client
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


def _job(name, *, assets=2, **options):
    connector = ConnectorFactory(name=f"src-{name}")
    make_assets(connector, [10] * assets)
    return make_job(connector=connector, name=name, batch_weight=10, **options)


def _fail(job):
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_fail(
        batch_id=batch.id, attempt=batch.attempt, error={"type": "E", "message": "x"}
    )


def _plant() -> dict[str, str]:
    """One job in every state; job name -> the state it is in."""
    _fail(_job("s-blocked", max_attempts=1))
    late = _job("s-late", schedule_seconds=60)
    Watermark.objects.filter(job=late).update(updated_at=timezone.now() - timedelta(hours=1))
    _fail(_job("s-failing", max_attempts=3))
    unreadable = _job("s-unreadable", assets=0)
    Connector.objects.filter(pk=unreadable.connector_id).update(
        config={"meta_table": "no_such_table_anywhere"}
    )
    waiting = _job("s-connector")
    Connector.objects.filter(pk=waiting.connector_id).update(state=ConnectorState.PAUSED)
    paused = _job("s-paused", schedule_seconds=60)
    Job.objects.filter(pk=paused.pk).update(paused=True)
    Watermark.objects.filter(job=paused).update(updated_at=timezone.now() - timedelta(hours=1))
    _job("s-catching-up")
    current = _job("s-current", assets=1)
    batch = lifecycle.batch_acquire(job=current, worker="w")
    lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    return {
        "s-blocked": "blocked",
        "s-late": "late",
        "s-failing": "failing",
        "s-unreadable": "unreadable",
        "s-connector": "connector",
        "s-paused": "paused",
        "s-catching-up": "catching_up",
        "s-current": "current",
    }


def test_counts_page_filter_and_alerts_agree_on_a_job_in_every_state(role_users):
    planted = _plant()
    assert set(planted.values()) == set(selectors_health.STATES)
    health = selectors_health.Health()

    everyone, matching = health.counts("s-")
    assert everyone == matching == dict.fromkeys(selectors_health.STATES, 1)
    page = health.page(limit=100, offset=0)
    assert [(row.name, row.state) for row in page] == sorted(
        planted.items(), key=lambda item: selectors_health.STATES.index(item[1])
    )
    assert {row.name: row.state for row in selectors_health.job_rows()} == planted
    for state in selectors_health.STATES:
        shown = health.page(state=state, limit=100, offset=0)
        assert [row.name for row in shown] == [n for n, s in planted.items() if s == state]

    # the facts behind the states, as the rows carry them
    rows = {row.name: row for row in page}
    assert rows["s-unreadable"].lag is None
    assert rows["s-late"].late > timedelta(minutes=59) and rows["s-paused"].late is None
    assert rows["s-current"].lag.items == 0 and rows["s-catching-up"].lag.items == 2

    # the alerts name exactly the blocked and the late job
    found = selectors_alerts.alerts()
    assert [(a.kind, a.subject) for a in found if a.kind in ("dead_batches", "watermark_late")] == [
        ("dead_batches", "s-blocked"),
        ("watermark_late", "s-late"),
    ]

    viewer = Client()
    viewer.force_login(role_users["viewer"])
    text = viewer.get("/?state=late").content.decode()
    assert 'data-job="s-late"' in text and text.count('data-job="') == 1
    assert "late (1)" in text and "current (1)" in text

    # every row's state tag is its state (failing and unreadable included)
    text = viewer.get("/").content.decode()
    cells = re.findall(
        r'data-job="([^"]+)">.*?<td data-state="([a-z_]+)"><span class="tag[^"]*" '
        r'title="[^"]*">([^<]+)</span>',
        text,
        re.S,
    )
    labels = {"catching_up": "catching up", "connector": "connector paused"}
    assert {name: (state, tag) for name, state, tag in cells} == {
        name: (state, labels.get(state, state)) for name, state in planted.items()
    }


def test_a_page_reads_job_health_once_and_its_rows_lag_as_counted_alone(role_users):
    planted = _plant()
    for number in range(3):  # every job past its watermark, some far, a few with no asset
        _job(f"s-more-{number}", assets=5 + number)
    viewer = Client()
    viewer.force_login(role_users["viewer"])
    for url in ("/", "/?state=catching_up&q=s-", "/?page=1", "/api/v1/alerts/"):
        with CaptureQueriesContext(connection) as queries:
            assert viewer.get(url).status_code == 200
        reads = [q["sql"] for q in queries.captured_queries if "open_batches AS (" in q["sql"]]
        assert len(reads) == 1, (url, len(reads))

    # the lag a row carries (read for the returned rows only) is the one counted job by job
    page = selectors_health.Health().page(limit=100, offset=0)
    assert {row.name for row in page} >= set(planted)
    counted = selectors.jobs_lag_by_id([row.id for row in page])
    assert {row.name: row.lag for row in page} == {row.name: counted[row.id] for row in page}

    # /metrics' rows: the dead blocker read with them is jobs_blockers' dead one, and the alerts'
    # labels read from them are those of the alerts built one by one
    rows = selectors_health.Health().rows()
    held = selectors_health.blockers_of([row.id for row in rows])
    assert (
        {row.name: row.blocker for row in rows if row.blocker}
        == {
            row.name: held[row.id]
            for row in rows
            if row.id in held and held[row.id].status == "dead"
        }
        != {}
    )
    assert selectors_alerts.alert_labels(rows) == [
        (a.kind, a.subject, a.severity) for a in selectors_alerts.alerts_page(rows=rows).alerts
    ]


def test_the_alerts_api_pages_the_critical_first(role_users, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "PAGE_SIZE": 2}
    from rest_framework.settings import api_settings

    api_settings.reload()
    try:
        for name in ("d-1", "d-2", "d-3"):
            _fail(_job(name, max_attempts=1))
        late = _job("l-1", schedule_seconds=60)
        Watermark.objects.filter(job=late).update(updated_at=timezone.now() - timedelta(hours=1))
        client = token_client(role_users["viewer"])
        seen = []
        url = "/api/v1/alerts/"
        while url:
            body = client.get(url).json()
            assert body["count"] == 5  # 3 dead, the reaper that never ran, 1 late
            assert body["by_kind"]["dead_batches"] == 3
            seen += [(a["kind"], a["subject"]) for a in body["alerts"]]
            url = body["next"]
        assert seen == [
            ("dead_batches", "d-1"),
            ("dead_batches", "d-2"),
            ("dead_batches", "d-3"),
            ("reaper_overdue", ""),
            ("watermark_late", "l-1"),
        ]
        assert client.get("/api/v1/alerts/?page=9").status_code == 404
        assert client.get("/api/v1/alerts/?page=0").status_code == 400
        # a slice costs its own alerts: the same as the whole list, cut
        assert [
            (a.kind, a.subject) for a in selectors_alerts.alerts_page(limit=2, offset=2).alerts
        ] == seen[2:4]
    finally:
        api_settings.reload()


def test_metrics_reuse_their_exposition_for_the_configured_seconds(settings):
    from inventory.api import metrics

    settings.METRICS_TOKEN = "scrape-me"
    client = Client()

    def scrape() -> str:
        return client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()

    settings.METRICS_CACHE_SECONDS = 3600
    metrics._cache["at"] = float("-inf")  # whatever an earlier test left
    scrape()
    _job("m-new")
    assert 'job="m-new"' not in scrape()  # the same exposition, rendered before the job existed
    settings.METRICS_CACHE_SECONDS = 0
    assert 'job="m-new"' in scrape()

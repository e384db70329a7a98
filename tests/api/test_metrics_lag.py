"""The lag /metrics writes for a job is the lag its watermark's page shows (GET
/api/v1/jobs/<name>/watermark/), whatever moved the watermark or the assets below it.

The two are read by different routes: /metrics takes the sums below the watermark from the
watermark's own row (dashboard.sql: health_metrics; prefix_sums.sql: tidemark_watermark_done and
tidemark_watermarks_resum keep them), the API probes the assets' prefix sums at the watermark
(queries.sql: jobs_lag). Each step below moves one of them and compares both, for two jobs sharing
a connector.
"""

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from inventory.models import Asset, Batch, BatchStatus
from inventory.services import lifecycle
from inventory.services.assets import assets_register
from inventory.services.backfills import backfill_create
from inventory.sql import gateway
from tests.support.api_support import make_inventory, token_client
from tests.support.factories import make_job

pytestmark = pytest.mark.django_db

WEIGHTS = [40, 10, 40, 30, 20, 40, 50, 60]


def _scraped(client) -> dict[str, tuple[int, int]]:
    """job -> (lag items, lag weight) as /metrics writes them (`full`: the weight too)."""
    body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    found: dict[str, dict[str, int]] = {}
    for family in text_string_to_metric_families(body):
        if family.name in ("tidemark_lag_items", "tidemark_lag_weight"):
            for sample in family.samples:
                found.setdefault(sample.labels["job"], {})[family.name] = int(sample.value)
    return {
        job: (lag["tidemark_lag_items"], lag["tidemark_lag_weight"]) for job, lag in found.items()
    }


def _shown(api, job) -> tuple[int, int]:
    lag = api.get(f"/api/v1/jobs/{job.name}/watermark/").json()["lag"]
    return lag["items"], lag["weight"]


def _agree(client, api, *jobs) -> list[tuple[int, int]]:
    """Each job's lag, the same on /metrics and on its watermark's page."""
    scraped = _scraped(client)
    shown = [_shown(api, job) for job in jobs]
    assert [scraped[job.name] for job in jobs] == shown
    return shown


def _commit_next(job) -> Batch:
    batch = lifecycle.batch_acquire(job=job, worker="w")
    assert batch is not None
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    return batch


def _correct(api, job, **body) -> None:
    response = api.post(
        f"/api/v1/jobs/{job.name}/watermark/", {"reason": "test", **body}, format="json"
    )
    assert response.status_code == 200, response.content


@override_settings(METRICS_TOKEN="scrape-me", METRICS_PER_JOB="full")
def test_metrics_show_the_lag_the_api_shows_through_commits_backfills_replays_and_corrections(
    client, role_users
):
    connector, job = make_inventory(weights=WEIGHTS, max_items=2, batch_weight=1000)
    other = make_job(connector=connector, name="other", max_items=3, batch_weight=1000)
    api = token_client(role_users["admin"])
    ids = list(connector.assets.order_by("id").values_list("id", flat=True))
    everything = (len(WEIGHTS), sum(WEIGHTS))
    assert _agree(client, api, job, other) == [everything, everything]

    # commits: two batches of two items, and one of three for the other job
    first = _commit_next(job)
    _commit_next(job)
    _commit_next(other)
    assert _agree(client, api, job, other) == [(4, sum(WEIGHTS[4:])), (5, sum(WEIGHTS[3:]))]

    # a backfill over committed items: its batches commit, the watermark stays
    backfill = backfill_create(job=job, range_start=ids[0], range_end=ids[3], reason="test")
    for queued in Batch.objects.filter(backfill=backfill).order_by("id"):
        started = lifecycle.batch_start(batch_id=queued.pk, worker="w")
        lifecycle.batch_succeed(batch_id=started.pk, attempt=started.attempt)
    assert not Batch.objects.filter(backfill=backfill).exclude(status=BatchStatus.SUCCEEDED)
    assert _agree(client, api, job, other)[0] == (4, sum(WEIGHTS[4:]))

    # a replay from the first batch's end, then its items committed again
    _correct(api, job, position=first.span.upper, replay=True)
    assert _agree(client, api, job, other)[0] == (6, sum(WEIGHTS[2:]))
    _commit_next(job)
    _commit_next(job)
    assert _agree(client, api, job, other)[0] == (2, sum(WEIGHTS[6:]))

    # a correction forward past every item seen, then items registered below it: behind it,
    # so no lag, where the other job's grows by them
    _correct(api, job, position=ids[-1] + 1000, skip_unseen=True)
    assert _agree(client, api, job, other)[0] == (0, 0)
    landing = connector.config["path"]
    assets_register(
        connector=connector, items=[(f"{landing}/late-{i}.parquet", 7, {}) for i in range(2)]
    )
    late = list(connector.assets.filter(id__gt=ids[-1]).values_list("id", flat=True))
    assert len(late) == 2 and max(late) < ids[-1] + 1000
    assert _agree(client, api, job, other) == [(0, 0), (7, sum(WEIGHTS[3:]) + 14)]

    # the weight of an item below both watermarks recounted (a table slice restated), then an
    # item below the other job's watermark and one past it deleted
    gateway.restatement_slice_counts(counts=[(ids[1], 500)])
    assert _agree(client, api, job, other) == [(0, 0), (7, sum(WEIGHTS[3:]) + 14)]
    Asset.objects.filter(pk__in=[ids[0], ids[4]]).delete()
    assert _agree(client, api, job, other) == [(0, 0), (6, sum(WEIGHTS[3:]) - WEIGHTS[4] + 14)]

    # the correction back to the job's start: every item left is behind it again
    _correct(api, job, position=job.start_position, replay=True)
    left = (len(WEIGHTS) - 2 + 2, sum(WEIGHTS) - WEIGHTS[0] - WEIGHTS[4] - WEIGHTS[1] + 500 + 14)
    assert _agree(client, api, job, other)[0] == left

"""A job's lag read from the assets' prefix sums (two index lookups) equals the lag counted by a
scan of the assets past its watermark, for random histories: registrations (several at once in
separate processes too), inserts through the ORM, deletes, weight changes and connector resets.
And the hourly rates rollup equals a recount of the finished attempts."""

import random
from collections import Counter
from datetime import UTC

import pytest
from django.conf import settings
from django.db import connection

from inventory import selectors, selectors_health
from inventory.models import Asset, BatchAttempt, JobHourlyRates, Watermark
from inventory.services import lifecycle
from inventory.services.assets import assets_register
from inventory.services.connectors import connector_reset
from inventory.sql import query
from tests.support.factories import AssetFactory, ConnectorFactory, make_job
from tests.support.processes import _run_in_processes


def _scanned_lag(job_id: int) -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(a.id), coalesce(sum(a.weight), 0) FROM inventory_job AS j "
            "JOIN inventory_watermark AS w ON w.job_id = j.id "
            "LEFT JOIN inventory_asset AS a ON a.connector_id = j.connector_id "
            "AND a.id >= w.position WHERE j.id = %s",
            [job_id],
        )
        items, weight = cursor.fetchone()
    return int(items), int(weight)


def _sums_recounted(connector_ids) -> None:
    """Every asset's prefix sums are those a window over its connector's assets gives."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, cum_count, cum_weight, count(*) OVER w, sum(weight) OVER w "
            "FROM inventory_asset WHERE connector_id = ANY(%s) "
            "WINDOW w AS (PARTITION BY connector_id ORDER BY id)",
            [list(connector_ids)],
        )
        wrong = [row for row in cursor.fetchall() if (row[1], row[2]) != (row[3], row[4])]
    assert not wrong, wrong[:5]


def _lags_agree(jobs, rng) -> None:
    """Each job's watermark at random positions (before, inside and past its assets): the
    prefix-sum lag equals the scanned one."""
    ids = list(Asset.objects.values_list("id", flat=True)) or [1]
    for _ in range(3):
        for job in jobs:
            position = rng.choice([0, min(ids), max(ids) + 1, rng.randint(0, max(ids) + 2)])
            Watermark.objects.filter(job=job).update(position=position)
        found = selectors.jobs_lag_by_id([job.pk for job in jobs])
        for job in jobs:
            lag = found[job.pk]
            assert (lag.items, lag.weight) == _scanned_lag(job.pk), (job.name, position)
    # the coverage strip's counts of id ranges come from the same sums
    for job in jobs:
        lows = sorted({rng.randint(0, max(ids) + 2) for _ in range(4)})
        highs = [low + rng.randint(0, max(ids) + 2) for low in lows]
        with connection.cursor() as cursor:
            cursor.execute(
                query("asset_counts_between"),
                {"connector": job.connector_id, "lows": lows, "highs": highs},
            )
            counted = dict(cursor.fetchall())
            for low, high in zip(lows, highs, strict=True):
                cursor.execute(
                    "SELECT count(*) FROM inventory_asset "
                    "WHERE connector_id = %s AND id >= %s AND id < %s",
                    [job.connector_id, low, high],
                )
                assert counted[low] == cursor.fetchone()[0], (low, high)


@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(4))
def test_prefix_sum_lag_equals_the_scanned_lag_after_random_histories(seed):
    rng = random.Random(seed)
    landing = settings.DATA_DIR / "landing"
    connectors = [
        ConnectorFactory(config={"path": str(landing / f"s{seed}-{n}")}) for n in range(3)
    ]
    jobs = [make_job(connector=c) for c in connectors for _ in range(2)]
    made = 0
    for _step in range(40):
        connector = rng.choice(connectors)
        base = connector.config["path"]
        action = rng.random()
        if action < 0.45:  # registration, some locations known already, one given twice
            names = [f"{base}/f{rng.randint(0, made + 5)}" for _ in range(rng.randint(1, 6))]
            names.append(names[0])
            assets_register(
                connector=connector,
                items=[(name, rng.randint(0, 2**40), {}) for name in names],
            )
            made += len(names)
        elif action < 0.6:  # another path: the ORM (admin, factories), sums left to the trigger
            AssetFactory(connector=connector, weight=rng.randint(0, 1000))
        elif action < 0.75:  # a delete of some assets, anywhere
            ids = list(Asset.objects.filter(connector=connector).values_list("id", flat=True))
            if ids:
                Asset.objects.filter(id__in=rng.sample(ids, rng.randint(1, len(ids)))).delete()
        elif action < 0.9:  # weights recounted (a restatement of late table rows)
            ids = list(Asset.objects.filter(connector=connector).values_list("id", flat=True))
            if ids:
                Asset.objects.filter(id__in=rng.sample(ids, min(3, len(ids)))).update(
                    weight=rng.randint(0, 5000)
                )
        else:  # a reset to another directory forgets the connector's assets
            path = landing / f"s{seed}-{connector.pk}-{_step}"
            path.mkdir(parents=True, exist_ok=True)
            connector.refresh_from_db()
            connector = connector_reset(
                connector=connector, config={"path": str(path)}, actor="t", reason="moved"
            )
            connectors = [connector if c.pk == connector.pk else c for c in connectors]
        _sums_recounted([c.pk for c in connectors])
        if _step % 5 == 4:
            _lags_agree(jobs, rng)
    _lags_agree(jobs, rng)


def _register_many(connector_id: int, worker: int, seed: int) -> None:
    from inventory.models import Connector

    rng = random.Random(seed)
    connector = Connector.objects.get(pk=connector_id)
    for round_ in range(15):
        assets_register(
            connector=connector,
            items=[
                # workers share some names: a known one is skipped, never counted twice
                (f"/shared/r{round_}-{rng.randint(0, 12)}", rng.randint(0, 10**6), {})
                for _ in range(rng.randint(1, 8))
            ],
        )


@pytest.mark.django_db(transaction=True)
def test_registrations_in_separate_processes_keep_the_prefix_sums():
    connector = ConnectorFactory()
    job = make_job(connector=connector)
    _run_in_processes(_register_many, [(connector.pk, n, n) for n in range(4)])
    assert Asset.objects.filter(connector=connector).count() > 20
    _sums_recounted([connector.pk])
    _lags_agree([job], random.Random(1))


@pytest.mark.django_db
def test_the_rates_rollup_equals_a_recount_after_commits_failures_and_retries():
    rng = random.Random(5)
    jobs = []
    for n in range(3):
        connector = ConnectorFactory()
        assets_register(
            connector=connector,
            items=[(f"/r{n}/f{i}", rng.randint(1, 30), {}) for i in range(30)],
        )
        jobs.append(
            make_job(connector=connector, batch_weight=40, max_attempts=2, retry_backoff_seconds=0)
        )
    for _ in range(60):
        job = rng.choice(jobs)
        batch = lifecycle.batch_acquire(job=job, worker="w")
        if batch is None:
            continue
        if rng.random() < 0.35:
            failed = lifecycle.batch_fail(
                batch_id=batch.id, attempt=batch.attempt, error={"type": "Injected"}
            )
            if failed.status == "dead":
                lifecycle.batch_retry(batch_id=failed.id, actor="t")
        else:
            lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    finished = BatchAttempt.objects.exclude(outcome="").select_related("batch")
    recount = Counter()
    for attempt in finished:
        hour = attempt.finished_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        ok = attempt.outcome == "succeeded"
        key = (attempt.batch.job_id, hour)
        recount[key, "succeeded"] += ok
        recount[key, "failed"] += not ok
        recount[key, "items"] += attempt.batch.item_count if ok else 0
        recount[key, "weight"] += attempt.batch.weight if ok else 0
    assert sum(v for (k, what), v in recount.items() if what == "failed") > 0
    rolled = Counter()
    for row in JobHourlyRates.objects.all():
        key = (row.job_id, row.hour.astimezone(UTC))
        for what in ("succeeded", "failed", "items", "weight"):
            rolled[key, what] += int(getattr(row, what))
    assert +rolled == +recount
    # and the dashboard's rates read it: the day's totals per job
    rates = selectors_health.jobs_rates(job_ids=[job.pk for job in jobs])
    for job in jobs:
        mine = {what: v for (key, what), v in recount.items() if key[0] == job.pk}
        assert sum(rates[job.pk].succeeded) == mine.get("succeeded", 0)
        assert sum(rates[job.pk].failed) == mine.get("failed", 0)
        assert sum(rates[job.pk].items) == mine.get("items", 0)
        assert sum(rates[job.pk].weight) == mine.get("weight", 0)

"""A job's schedule_cron is accepted only when celery beat can compute when it fires, and beat's
schedule sync survives a stored one it cannot (issue 42, item 4).

`0 0 31 2 *` passed the field check (each field is in range); celery's crontab then raised
"unable to rollover" when beat asked it for the next run, and beat exited: the lease reaper,
discovery, backfill pacing and every schedule stopped, and a restarted beat died again."""

import logging
from datetime import UTC, datetime, timedelta

import pytest
from celery.schedules import crontab
from django.test import override_settings
from django_celery_beat.models import CrontabSchedule, PeriodicTask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import Job
from inventory.services import scheduling
from inventory.services.cron import HORIZON_YEARS, parse_cron
from inventory.services.errors import InvalidInput
from tests.support.api_support import make_inventory, session_client, token_client
from tests.support.factories import ConnectorFactory, make_job

NEVER = ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4 *", "0 0 31 4,6,9,11 *", "15 3 30,31 2 *"]
NOW = datetime(2026, 12, 6, 4, 30, tzinfo=UTC)


def _celery_next(expression: str, now: datetime) -> datetime | None:
    """What beat computes: the crontab's remaining estimate from `now` (None when celery cannot
    compute one), as ModelEntry.is_due asks it."""
    minute, hour, dom, month, dow = expression.split()
    schedule = crontab(minute, hour, dow, dom, month, nowfun=lambda: now)
    try:
        return now + schedule.remaining_estimate(now)
    except Exception:
        return None


def _accepted(expression: str, now: datetime) -> bool:
    try:
        parse_cron(expression, now=now)
    except InvalidInput:
        return False
    return True


@pytest.mark.parametrize("expression", NEVER)
def test_celery_itself_cannot_compute_these(expression):
    assert _celery_next(expression, NOW) is None


@pytest.mark.django_db
@pytest.mark.parametrize("expression", NEVER)
def test_a_cron_that_never_fires_is_a_400_naming_schedule_cron_on_create_and_change(
    role_users, expression
):
    connector, job = make_inventory()
    api = token_client(role_users["admin"])
    payload = {"name": "monthly", "connector": connector.name, "batch_weight": 500}
    response = api.post("/api/v1/jobs/", {**payload, "schedule_cron": expression}, format="json")
    assert response.status_code == 400, response.content
    message = " ".join(response.json()["schedule_cron"])
    assert expression in message and "never fires" in message
    assert not Job.objects.filter(name="monthly").exists()

    changed = api.patch(f"/api/v1/jobs/{job.name}/", {"schedule_cron": expression}, format="json")
    assert changed.status_code == 400
    assert "schedule_cron" in changed.json()
    job.refresh_from_db()
    assert job.schedule_cron == ""


@pytest.mark.django_db
@pytest.mark.parametrize(
    "expression", ["0 0 29 2 *", "0 0 31 * *", "0 0 31 1-3 *", "0 0 29 2 1", "*/7 */5 * * *"]
)
def test_rare_but_real_dates_are_accepted(expression):
    assert make_job(connector=ConnectorFactory(), schedule_cron=expression).schedule_cron


def _stored_with(expression: str):
    """A job whose cron was stored before the rule (written around the check)."""
    job = make_job(
        connector=ConnectorFactory(name="old-cron"), name="feb-31st", schedule_seconds=60
    )
    Job.objects.filter(pk=job.pk).update(schedule_seconds=None, schedule_cron=expression)
    return job


@pytest.mark.django_db
def test_the_sync_skips_a_stored_cron_beat_cannot_compute_and_says_so(role_users, caplog):
    fine = make_job(
        connector=ConnectorFactory(name="fine"), name="nightly", schedule_cron="0 2 * * *"
    )
    bad = _stored_with("0 0 31 2 *")
    # the entry an older sync made for it: beat would die on it
    bad_tab = CrontabSchedule.objects.create(
        minute="0", hour="0", day_of_month="31", month_of_year="2", day_of_week="*", timezone="UTC"
    )
    PeriodicTask.objects.create(
        name=f"{scheduling.JOB_PREFIX}{bad.name}", task="tidemark.run_job", crontab=bad_tab
    )
    with caplog.at_level(logging.ERROR):
        report = scheduling.schedules_sync()
    assert list(report.skipped) == [bad.name]
    names = set(PeriodicTask.objects.values_list("name", flat=True))
    assert f"{scheduling.JOB_PREFIX}{fine.name}" in names
    assert f"{scheduling.JOB_PREFIX}{bad.name}" not in names
    assert {scheduling.REAPER, f"{scheduling.PREFIX}discover:fine"} & names
    assert scheduling.REAPER in names
    assert any(bad.name in record.getMessage() for record in caplog.records)
    # every entry left is one celery can compute
    for entry in PeriodicTask.objects.exclude(crontab=None).select_related("crontab"):
        assert entry.crontab.schedule.remaining_estimate(datetime.now(UTC)) is not None

    # an alert naming the job: the API, the overview's strip, /metrics
    alerts = token_client(role_users["viewer"]).get("/api/v1/alerts/").json()
    found = [a for a in alerts["alerts"] if a["kind"] == "schedule_invalid"]
    assert [a["subject"] for a in found] == [bad.name]
    assert found[0]["severity"] == "critical" and "0 0 31 2 *" in found[0]["message"]
    assert alerts["by_kind"]["schedule_invalid"] == 1
    page = session_client(role_users["viewer"]).get("/").content.decode()
    assert 'data-kind="schedule_invalid"' in page and "Not scheduled" in page
    assert f"{bad.name}: not scheduled" in page
    metrics = token_client(role_users["viewer"]).get("/metrics").content.decode()
    assert 'tidemark_alerts{kind="schedule_invalid",severity="critical"} 1.0' in metrics
    assert "tidemark_alert{" not in metrics  # one series per alert only under `full`
    with override_settings(METRICS_PER_JOB="full"):
        metrics = token_client(role_users["viewer"]).get("/metrics").content.decode()
    assert (
        f'tidemark_alert{{kind="schedule_invalid",severity="critical",subject="{bad.name}"}} 1'
        in metrics
    )

    # once the job is fixed, the next sync schedules it and the alert goes
    Job.objects.filter(pk=bad.pk).update(schedule_cron="0 0 28 2 *")
    report = scheduling.schedules_sync()
    assert report.skipped == {}
    assert PeriodicTask.objects.filter(name=f"{scheduling.JOB_PREFIX}{bad.name}").exists()
    alerts = token_client(role_users["viewer"]).get("/api/v1/alerts/").json()
    assert alerts["by_kind"]["schedule_invalid"] == 0


# --- differential: Tidemark's check against celery's own computation -------------------------

_numbers = {
    "minute": (0, 59),
    "hour": (0, 23),
    "dom": (1, 31),
    "month": (1, 12),
    "dow": (0, 6),
}


def _field(kind: str):
    low, high = _numbers[kind]
    number = st.integers(low, high)
    single = number.map(str)
    ranged = st.tuples(number, number).map(lambda p: f"{min(p)}-{max(p)}")
    stepped = st.tuples(st.sampled_from(["*", f"{low}-{high}"]), st.integers(1, high)).map(
        lambda p: f"{p[0]}/{p[1]}"
    )
    listed = st.lists(st.one_of(single, ranged), min_size=1, max_size=4).map(",".join)
    return st.one_of(st.just("*"), single, ranged, stepped, listed)


# days near the ends of months, where impossible dates live, more often than uniform
_dom = st.one_of(
    _field("dom"),
    st.lists(st.integers(28, 31), min_size=1, max_size=3).map(lambda d: ",".join(map(str, d))),
)
_month = st.one_of(_field("month"), st.sampled_from(["2", "4", "6", "9", "11", "2,4", "4-6"]))
crons = st.tuples(_field("minute"), _field("hour"), _dom, _month, _field("dow")).map(" ".join)
starts = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2090, 12, 31), timezones=st.just(UTC)
)


@pytest.mark.parametrize(
    "expression",
    NEVER + ["* * * * *", "0 0 29 2 *", "59 23 31 12 *", "0 0 1 1 0", "0 0 29 2 1", "0 0 31 2 *"],
)
@pytest.mark.parametrize("now", [NOW, datetime(2096, 2, 29, 0, 1, tzinfo=UTC)])
def test_the_check_accepts_exactly_what_celery_can_schedule_corpus(expression, now):
    following = _celery_next(expression, now)
    computable = following is not None and following - now <= timedelta(days=366 * HORIZON_YEARS)
    assert _accepted(expression, now) == computable


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression=crons, now=starts)
def test_the_check_accepts_exactly_what_celery_can_schedule(expression, now):
    """Accepted but celery cannot compute (or not within the horizon), or refused though celery
    computes a run within it: either is a failure."""
    try:  # a field celery's parser refuses is refused by the check too
        crontab(*expression.split()[:2], expression.split()[4], *expression.split()[2:4])
    except ValueError:
        assert not _accepted(expression, now)
        return
    following = _celery_next(expression, now)
    computable = following is not None and following - now <= timedelta(days=366 * HORIZON_YEARS)
    assert _accepted(expression, now) == computable, (expression, now, following)
    if computable:
        # and beat's own question for an entry last run at `now` answers too
        minute, hour, dom, month, dow = expression.split()
        crontab(minute, hour, dow, dom, month, nowfun=lambda: now).is_due(now)


@pytest.mark.django_db
def test_beats_scheduler_skips_an_entry_it_cannot_compute_instead_of_exiting(caplog):
    """An entry made by hand in the admin (the sync leaves those alone) with February 31st: the
    scheduler Tidemark configures logs it and asks again later; django-celery-beat's own entry
    raises, which ended beat."""
    from django_celery_beat.schedulers import ModelEntry

    from controlplane.beat import RETRY_SECONDS, SafeEntry
    from controlplane.celery import app

    task = PeriodicTask.objects.create(
        name="by-hand",
        task="tidemark.reap_leases",
        crontab=CrontabSchedule.objects.create(
            minute="0", hour="0", day_of_month="31", month_of_year="2", timezone="UTC"
        ),
    )
    with pytest.raises(RuntimeError):
        ModelEntry(task, app=app).is_due()
    with caplog.at_level(logging.ERROR):
        assert tuple(SafeEntry(task, app=app).is_due()) == (False, RETRY_SECONDS)
    assert any("by-hand" in record.getMessage() for record in caplog.records)

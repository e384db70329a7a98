"""The freshness-driven backfill throttle through the real services, SQL, API and pages: a live job
missing its target slows the running backfills (rate and concurrency, as acquire applies them),
they speed up again once it is inside, never below the floor; a person's pin overrides it; every
decision is recorded and shown."""

import math
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from inventory.models import Backfill, Batch, FreshnessThrottle, ThrottleDecision
from inventory.services import dispatch, freshness, lifecycle
from inventory.services.backfills import backfill_create
from inventory.services.errors import InvalidInput
from inventory.services.jobs import job_update
from tests.support.api_support import session_client, token_client
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def nudges(monkeypatch):
    sent = []
    monkeypatch.setattr(dispatch, "dispatch", lambda job_ids: sent.extend(job_ids))
    return sent


def _admissible(backfill) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tidemark_backfill_admissible(%s)", [backfill.pk])
        return [row[0] for row in cursor.fetchall()]


def _live_and_backfill(*, live_pending=5, target_items=2):
    """A live job with `live_pending` items waiting and an items target, and another job whose
    backfill of 8 batches (weight 10 each, max_concurrency 4) has 2 batches running."""
    live_connector = ConnectorFactory()
    make_assets(live_connector, [10] * live_pending)
    live = make_job(
        connector=live_connector, name="live", batch_weight=10, freshness_target_items=target_items
    )
    connector = ConnectorFactory()
    assets = make_assets(connector, [10] * 8)
    job = make_job(connector=connector, name="history", batch_weight=10, max_items=1)
    for _ in assets:
        batch = lifecycle.batch_acquire(job=job, worker="w")
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    backfill = backfill_create(
        job=job, range_start=assets[0].pk, range_end=assets[-1].pk, max_concurrency=4
    )
    running = [lifecycle.batch_acquire(job=job, worker="w") for _ in range(2)]
    assert all(b.backfill_id == backfill.pk for b in running)
    # begun more than a window ago: the weight started in the window is its pace as it is
    Backfill.objects.filter(pk=backfill.pk).update(created_at=timezone.now() - timedelta(minutes=2))
    return live, job, backfill


def _step():
    """One step now, whatever the interval (the pacing step would take it once it is due)."""
    return freshness.throttle_control_step(force=True)


def test_a_live_job_missing_its_target_slows_the_running_backfill_in_the_pacing_step(nudges):
    live, job, backfill = _live_and_backfill()
    assert len(_admissible(backfill)) == 2  # no limit yet: 2 more slots of its 4

    sent = freshness.backfills_pace_step()

    row = FreshnessThrottle.objects.get(id=1)
    # 20 weight started in the window, halved; floor = one batch of 10: the cap halves 4 to 2
    assert (row.rate, row.concurrency, row.reference_rate) == (10, 2, 20)
    assert _admissible(backfill) == []
    assert sent == {}
    assert lifecycle.batch_acquire(job=job, worker="w") is None
    (decision,) = ThrottleDecision.objects.all()
    assert (decision.old_rate, decision.new_rate) == (None, 10)
    assert (decision.old_concurrency, decision.new_concurrency) == (None, 2)
    assert decision.missing == ["live"]
    assert "1 live job(s) miss their target (live)" in decision.reason


def test_a_backfill_younger_than_the_window_is_cut_from_its_pace_not_from_the_window(nudges):
    live, job, backfill = _live_and_backfill()
    # begun 15 s ago: the 20 weight it started is a pace of 80 a minute
    Backfill.objects.filter(pk=backfill.pk).update(
        created_at=timezone.now() - timedelta(seconds=15)
    )

    freshness.backfills_pace_step()

    row = FreshnessThrottle.objects.get(id=1)
    assert row.reference_rate == pytest.approx(80, abs=6)
    assert row.rate == pytest.approx(40, abs=3)


def test_the_step_waits_for_its_interval_by_the_database_clock():
    _live_and_backfill()
    assert _step() is not None
    assert freshness.throttle_control_step() is None
    FreshnessThrottle.objects.filter(id=1).update(stepped_at=timezone.now() - timedelta(hours=1))
    assert freshness.throttle_control_step() is not None


def test_the_backfill_speeds_up_again_once_every_live_job_is_well_inside(nudges):
    live, job, backfill = _live_and_backfill()
    _step()
    job_update(job=live, freshness_target_items=100)  # 5 of 100: well inside

    seen = []
    for _ in range(8):
        decision = _step()
        row = FreshnessThrottle.objects.get(id=1)
        seen.append((row.rate, row.concurrency))
        if row.rate is None and row.concurrency is None:
            break
    # +10% of the reference (20) a step, the cap +1 a step up to the backfill's own 4
    assert seen == [(12, 3), (14, None), (16, None), (18, None), (None, None)]
    assert "within 25% of their target" in decision.reason
    assert ThrottleDecision.objects.count() == 6
    # the limit is gone: the backfill fills its 4 slots again (2 running + 2)
    assert len(_admissible(backfill)) == 2


def test_a_job_between_a_quarter_and_half_of_its_target_holds_the_limit():
    live, _job, _backfill = _live_and_backfill()
    _step()
    job_update(job=live, freshness_target_items=15)  # 5 of 15: a third
    decision = _step()
    assert "limit held" in decision.reason
    assert not decision.changed
    assert ThrottleDecision.objects.count() == 1


def test_it_never_cuts_below_the_floor_and_each_backfill_keeps_moving():
    live, job, backfill = _live_and_backfill()
    for _ in range(6):
        last = _step()
    row = FreshnessThrottle.objects.get(id=1)
    assert (row.rate, row.concurrency) == (10, 1)  # one batch of 10 a minute, one running
    assert "held at the floor (10/min, concurrency 1)" in last.reason
    assert ThrottleDecision.objects.count() == 2  # the cut, then the cap 2 -> 1; holds unrecorded
    # once the running batches end and the window is past, one batch may start again
    Batch.objects.filter(backfill=backfill, status="running").update(
        started_at=timezone.now() - timedelta(minutes=5)
    )
    for batch in Batch.objects.filter(backfill=backfill, status="running"):
        lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    assert len(_admissible(backfill)) == 1
    claimed = lifecycle.batch_acquire(job=job, worker="w")
    assert claimed is not None and claimed.backfill_id == backfill.pk
    assert lifecycle.batch_acquire(job=job, worker="w") is None


def test_a_pin_overrides_the_controller_until_it_is_removed():
    live, job, backfill = _live_and_backfill()
    _step()
    freshness.throttle_pin(rate=1_000, actor="ops")
    with connection.cursor() as cursor:
        cursor.execute("SELECT tidemark_freshness_rate(), tidemark_freshness_concurrency()")
        assert cursor.fetchone() == (1_000, None)
    assert len(_admissible(backfill)) == 2  # the pin lifts the cap: 4 slots, 2 running
    decision = _step()  # the live job still misses: the controller holds its own state
    assert decision.reason.startswith("pinned at 1000/min by a person")
    row = FreshnessThrottle.objects.get(id=1)
    assert (row.rate, row.concurrency, row.pinned_rate, row.pinned_by) == (10, 2, 1_000, "ops")

    freshness.throttle_pin(rate=None, actor="ops")
    assert _admissible(backfill) == []
    reasons = list(ThrottleDecision.objects.order_by("id").values_list("reason", flat=True))
    assert reasons[1] == "pinned at 1000/min by ops"
    assert reasons[2].startswith("pin removed by ops")
    with pytest.raises(InvalidInput) as refused:
        freshness.throttle_pin(rate=0)
    assert refused.value.field == "pinned_rate"


def test_a_seconds_target_is_the_age_of_the_oldest_item_waiting():
    connector = ConnectorFactory()
    assets = make_assets(connector, [10, 10])
    job = make_job(connector=connector, name="aged", batch_weight=10, freshness_target_seconds=60)
    from inventory.models import Asset
    from inventory.selectors_freshness import jobs_freshness

    Asset.objects.filter(pk=assets[0].pk).update(
        discovered_at=timezone.now() - timedelta(minutes=10)
    )
    (row,) = jobs_freshness()
    assert row.name == job.name and row.missing
    assert 590 <= row.seconds_behind <= 660
    batch = lifecycle.batch_acquire(job=job, worker="w")
    lifecycle.batch_succeed(batch_id=batch.pk, attempt=batch.attempt)
    (row,) = jobs_freshness()
    assert not row.missing and row.seconds_behind < 60


def test_the_api_shows_decisions_and_takes_a_pin_from_an_operator(role_users):
    _live_and_backfill()
    _step()
    viewer = token_client(role_users["viewer"])
    body = viewer.get("/api/v1/backfill-throttle/freshness/").json()
    assert (body["rate"], body["concurrency"], body["pin"]) == (10, 2, None)
    assert body["jobs"][0]["job"] == "live" and body["jobs"][0]["missing"] is True
    assert body["decisions"][0]["missing"] == ["live"]
    assert body["decisions"][0]["new_rate"] == 10

    assert (
        viewer.put("/api/v1/backfill-throttle/freshness/", {"pinned_rate": 50}).status_code == 403
    )
    operator = token_client(role_users["operator"])
    refused = operator.put(
        "/api/v1/backfill-throttle/freshness/", {"pinned_rate": 0}, format="json"
    )
    assert refused.status_code == 400 and "pinned_rate" in refused.json()
    pinned = operator.put(
        "/api/v1/backfill-throttle/freshness/", {"pinned_rate": 50}, format="json"
    ).json()
    assert pinned["rate"] == 50 and pinned["pin"]["by"] == "operator-user"

    admin = token_client(role_users["admin"])
    assert (
        operator.patch(
            "/api/v1/backfill-throttle/freshness/", {"decrease_factor": 0.7}, format="json"
        ).status_code
        == 403
    )
    bad = admin.patch(
        "/api/v1/backfill-throttle/freshness/", {"decrease_factor": 1.5}, format="json"
    )
    assert bad.status_code == 400 and "decrease_factor" in bad.json()
    crossed = admin.patch(
        "/api/v1/backfill-throttle/freshness/", {"speed_below": 0.9}, format="json"
    )
    assert crossed.status_code == 400 and "speed_below" in str(crossed.json())
    done = admin.patch(
        "/api/v1/backfill-throttle/freshness/",
        {"decrease_factor": 0.7, "interval_seconds": 20},
        format="json",
    )
    assert done.status_code == 200
    assert done.json()["controller"]["decrease_factor"] == 0.7


@pytest.mark.parametrize(
    "field", ["increase_fraction", "decrease_factor", "floor_fraction", "slow_above", "speed_below"]
)
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", 1e308])
def test_a_setting_that_is_no_finite_share_is_a_400_naming_it_and_nothing_changes(
    role_users, field, value
):
    """DRF reads the strings "NaN" and "Infinity" as floats, and NaN passes every comparison:
    the service refuses it by name (it used to be stored, and every later read was a 500)."""
    admin = token_client(role_users["admin"])
    url = "/api/v1/backfill-throttle/freshness/"
    before = admin.get(url).json()["controller"]
    refused = admin.patch(url, {field: value}, format="json")
    assert refused.status_code == 400, refused.content
    assert list(refused.json()) == [field], refused.json()
    shown = admin.get(url)
    assert shown.status_code == 200 and shown.json()["controller"] == before
    row = FreshnessThrottle.objects.first()  # made on the first change
    assert row is None or math.isfinite(getattr(row, field))
    # the service's own rule, whichever caller: a value is a finite number in its range
    with pytest.raises(InvalidInput, match=field):
        freshness.throttle_control_configure(**{field: float(value)})


def test_the_job_api_takes_a_freshness_target_and_refuses_a_bad_one_by_name(role_users):
    connector = ConnectorFactory(name="targets")
    admin = token_client(role_users["admin"])
    body = {"name": "fresh", "connector": connector.name, "batch_weight": 10}
    bad = admin.post("/api/v1/jobs/", {**body, "freshness_target_seconds": 0}, format="json")
    assert bad.status_code == 400 and "freshness_target_seconds" in bad.json()
    made = admin.post("/api/v1/jobs/", {**body, "freshness_target_seconds": 300}, format="json")
    assert made.status_code == 201, made.json()
    changed = admin.patch("/api/v1/jobs/fresh/", {"freshness_target_items": 50}, format="json")
    assert changed.status_code == 200
    detail = admin.get("/api/v1/jobs/fresh/").json()
    assert (detail["freshness_target_seconds"], detail["freshness_target_items"]) == (300, 50)
    bad = admin.patch("/api/v1/jobs/fresh/", {"freshness_target_items": -1}, format="json")
    assert bad.status_code == 400 and "freshness_target_items" in bad.json()
    cleared = admin.patch("/api/v1/jobs/fresh/", {"freshness_target_seconds": None}, format="json")
    assert cleared.status_code == 200 and cleared.json()["freshness_target_seconds"] is None


def test_the_backfills_page_shows_the_decisions_and_the_overview_who_misses(role_users):
    _live_and_backfill()
    _step()
    client = session_client(role_users["viewer"])
    page = client.get(reverse("dashboard:backfills")).content.decode()
    assert 'id="throttle-decisions"' in page
    assert "1 live job(s) miss their target (live)" in page
    assert "Backfills slowed to 10 weight/min, at most 2 running batch(es) each" in page
    assert 'id="pin-form"' not in page  # a viewer cannot pin

    overview = client.get(reverse("dashboard:overview")).content.decode()
    assert 'id="freshness-missing"' in overview
    assert "5 items behind (target 2)" in overview

    job_page = client.get(reverse("dashboard:job", args=["live"])).content.decode()
    assert "at most 2 items waiting (now 5)" in job_page and "missed" in job_page
    other = client.get(reverse("dashboard:job", args=["history"])).content.decode()
    assert 'id="freshness-target"' not in other


def test_an_operator_pins_and_unpins_from_the_backfills_page(role_users):
    _live_and_backfill()
    _step()
    client = session_client(role_users["operator"])
    assert 'id="pin-form"' in client.get(reverse("dashboard:backfills")).content.decode()
    answer = client.post(reverse("dashboard:throttle-pin"), {"pinned_rate": "700"})
    assert answer.status_code == 302
    assert FreshnessThrottle.objects.get(id=1).pinned_rate == 700
    page = client.get(reverse("dashboard:backfills")).content.decode()
    assert "Backfills pinned at 700 weight/min by operator-user" in page
    assert "pinned at 700/min by operator-user" in page
    client.post(reverse("dashboard:throttle-pin"), {"pinned_rate": ""})
    assert FreshnessThrottle.objects.get(id=1).pinned_rate is None


def test_the_dashboards_job_form_sets_and_clears_a_freshness_target(role_users):
    connector = ConnectorFactory(name="formed")
    make_job(connector=connector, name="formed-job", batch_weight=10)
    client = session_client(role_users["admin"])
    form = client.get(reverse("dashboard:job-edit", args=["formed-job"])).content.decode()
    assert 'name="freshness_target_seconds"' in form and 'name="freshness_target_items"' in form
    from inventory.forms_edit import JobEditForm
    from inventory.models import Job

    job = Job.objects.get(name="formed-job")
    initial = JobEditForm.initial_of(job)
    posted = {k: "" if v is None else v for k, v in initial.items() if not isinstance(v, dict)}
    posted.update(batch_weight="10", freshness_target_seconds="120", freshness_target_items="")
    answer = client.post(reverse("dashboard:job-edit", args=["formed-job"]), posted)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    job.refresh_from_db()
    assert (job.freshness_target_seconds, job.freshness_target_items) == (120, None)
    posted.update(freshness_target_seconds="")
    client.post(reverse("dashboard:job-edit", args=["formed-job"]), posted)
    job.refresh_from_db()
    assert job.freshness_target_seconds is None
    posted.update(freshness_target_seconds="0")
    refused = client.post(reverse("dashboard:job-edit", args=["formed-job"]), posted)
    assert refused.status_code == 400
    assert "freshness_target_seconds" in refused.content.decode()


def test_turning_the_controller_off_lifts_its_limit_and_says_so():
    _live_and_backfill()
    _step()
    freshness.throttle_control_configure(enabled=False, actor="boss")
    row = FreshnessThrottle.objects.get(id=1)
    assert (row.rate, row.concurrency) == (None, None)
    latest = ThrottleDecision.objects.first()
    assert latest.reason == "controller turned off: its limit lifted by boss"
    assert (latest.old_rate, latest.new_rate) == (10, None)
    assert _step() is None  # off: no step, however late the live job is
    freshness.throttle_control_configure(enabled=True, actor="boss")
    assert _step().state.rate is not None
    with pytest.raises(InvalidInput) as refused:
        freshness.throttle_control_configure(speed_below=0.8)
    assert refused.value.field == "speed_below"


def test_an_operator_pins_the_rate_in_the_admin(role_users):
    _live_and_backfill()
    _step()
    client = session_client(role_users["operator"])
    url = reverse("admin:inventory_freshnessthrottle_change", args=[1])
    page = client.get(url)
    assert page.status_code == 200
    row = FreshnessThrottle.objects.get(id=1)
    posted = {
        "pinned_rate": "400",
        "enabled": "on",
        "increase_fraction": row.increase_fraction,
        "decrease_factor": row.decrease_factor,
        "floor_fraction": row.floor_fraction,
        "slow_above": row.slow_above,
        "speed_below": row.speed_below,
        "interval_seconds": row.interval_seconds,
    }
    answer = client.post(url, posted)
    assert answer.status_code == 302, answer.content.decode()[:3000]
    row.refresh_from_db()
    assert (row.pinned_rate, row.pinned_by) == (400, "operator-user")
    # a setting is an admin's: the operator's change of one is refused on the form
    refused = client.post(url, {**posted, "decrease_factor": "0.7"})
    assert refused.status_code == 200
    assert "admin role" in refused.content.decode()
    row.refresh_from_db()
    assert row.decrease_factor == 0.5
    listing = reverse("admin:inventory_throttledecision_changelist")
    assert "pinned at 400/min by operator-user" in client.get(listing).content.decode()


@pytest.mark.django_db(transaction=True)
def test_acquire_holds_the_controllers_row_while_it_spends_its_budget():
    """Two acquirers cannot both spend the last of the controller's rate: a claim takes its row
    (after the shared throttle's rows, docs/architecture.md's lock order) until it commits."""
    import threading

    from django.db import OperationalError, connections, transaction

    live, job, backfill = _live_and_backfill()
    _step()
    FreshnessThrottle.objects.filter(id=1).update(rate=1_000, concurrency=None)
    seen = []

    def other_session():
        try:
            with transaction.atomic(), connections["default"].cursor() as cursor:
                cursor.execute(
                    "SELECT 1 FROM inventory_freshnessthrottle WHERE id = 1 FOR UPDATE NOWAIT"
                )
            seen.append("free")
        except OperationalError:
            seen.append("locked")
        finally:
            connections["default"].close()

    with transaction.atomic():
        claimed = lifecycle.batch_acquire(job=job, worker="w")
        assert claimed is not None and claimed.backfill_id == backfill.pk
        probe = threading.Thread(target=other_session)
        probe.start()
        probe.join()
    assert seen == ["locked"]
    probe = threading.Thread(target=other_session)
    probe.start()
    probe.join()
    assert seen == ["locked", "free"]

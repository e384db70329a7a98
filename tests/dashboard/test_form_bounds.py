"""Out-of-range numbers and bad reasons through the dashboard's forms: each is refused as a form
error or a message naming what is wrong, never a 500 from the database, and nothing is saved.
The bounds are the columns' (inventory.bounds), as the API's serializers have them."""

import pytest
from django.test import Client

from inventory.models import Backfill, BackfillThrottle, Batch, BatchStatus, FreshnessThrottle
from tests.support.factories import make_assets, make_job

pytestmark = pytest.mark.django_db

HUGE = 2**70
BEYOND_SMALLINT = 2**15


@pytest.fixture
def operator(role_users) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(role_users["operator"])
    return client


@pytest.fixture
def job():
    job = make_job(name="bounded", batch_weight=100, max_items=2)
    make_assets(job.connector, [10, 10, 10, 10])
    return job


def _shown(response) -> str:
    """The page's text with the messages a redirect carried, followed."""
    return response.content.decode()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("priority", BEYOND_SMALLINT),
        ("priority", -BEYOND_SMALLINT - 1),
        ("max_concurrency", BEYOND_SMALLINT),
        ("batch_weight", HUGE),
        ("max_items", 2**31),
        ("range_start", HUGE),
        ("range_end", 2**63 - 1),
        ("reason", "x" * 2001),
    ],
)
@pytest.mark.parametrize("url", ["/backfills/", "/backfills/preview/"])
def test_a_backfill_form_refuses_what_its_columns_cannot_hold(operator, job, url, field, value):
    first = job.connector.assets.order_by("id").first().id
    body = {
        "job": job.name,
        "by": "ids",
        "range_start": first,
        "range_end": first + 3,
        "max_concurrency": 1,
        "priority": 0,
        field: value,
    }
    response = operator.post(url, body, follow=True)
    assert response.status_code in (200, 400), response.status_code
    page = _shown(response)
    assert "Ensure this value" in page, page[:2000]
    assert not Backfill.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("priority", BEYOND_SMALLINT),
        ("max_concurrency", BEYOND_SMALLINT),
        ("batch_weight", HUGE),
        ("max_items", HUGE),
        ("upper", HUGE),
    ],
)
def test_the_holes_backfill_refuses_what_its_columns_cannot_hold(operator, job, field, value):
    for preview in ("", "on"):
        response = operator.post(
            f"/jobs/{job.name}/gaps/backfill/", {field: value, "preview": preview}, follow=True
        )
        assert response.status_code in (200, 400), response.status_code
        assert "Ensure this value" in _shown(response)
    assert not Backfill.objects.exists()


@pytest.mark.parametrize("bound", ["lower", "upper"])
def test_the_gap_report_with_a_bound_beyond_bigint_reads_the_whole_job(operator, job, bound):
    response = operator.get(f"/jobs/{job.name}/gaps/", {bound: HUGE})
    assert response.status_code == 200
    assert "Ensure this value is less than or equal to" in _shown(response)


def test_a_throttle_or_pinned_rate_beyond_bigint_is_refused(operator):
    set_ = operator.post("/backfills/throttle/", {"weight_per_minute": HUGE}, follow=True)
    assert set_.status_code == 200 and "Ensure this value" in _shown(set_)
    assert not BackfillThrottle.objects.exists()
    pinned = operator.post("/backfills/throttle/pin/", {"pinned_rate": HUGE}, follow=True)
    assert pinned.status_code == 200 and "Ensure this value" in _shown(pinned)
    assert not FreshnessThrottle.objects.filter(pinned_rate__isnull=False).exists()


def test_an_overview_page_number_beyond_bigint_shows_the_last_page(operator, job):
    response = operator.get("/", {"page": HUGE})
    assert response.status_code == 200
    assert job.name in _shown(response)


@pytest.mark.parametrize(
    ("reason", "says"),
    [
        ("\x00abc", "U+0000"),
        ("clear \x1b[2J screen", "U+001B"),
        ("line\u2028break", "U+2028"),
        ("x" * 2001, "at most 2000 characters"),
    ],
)
def test_a_skip_or_cancel_reason_with_a_control_character_is_refused(role_users, reason, says):
    admin = Client(raise_request_exception=False)
    admin.force_login(role_users["admin"])
    job = make_job(name="reasons", batch_weight=10, max_items=1)
    make_assets(job.connector, [10, 10])
    from inventory.services import lifecycle

    dead = lifecycle.batch_acquire(job=job, worker="w")
    Batch.objects.filter(pk=dead.pk).update(status=BatchStatus.DEAD)
    queued = lifecycle.batch_acquire(job=job, worker="w")
    for batch, action in ((dead, "skip"), (queued, "cancel")):
        before = Batch.objects.get(pk=batch.pk).status
        response = admin.post(f"/batches/{batch.pk}/{action}/", {"reason": reason}, follow=True)
        assert response.status_code == 200
        assert says in _shown(response), _shown(response)[:3000]
        assert Batch.objects.get(pk=batch.pk).status == before
    # a tab and line breaks are text
    done = admin.post(f"/batches/{dead.pk}/skip/", {"reason": "bad file\n\tsee ticket"})
    assert done.status_code == 302
    assert Batch.objects.get(pk=dead.pk).status == BatchStatus.SKIPPED

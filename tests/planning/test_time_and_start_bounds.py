"""Bounds: a datetime value is checked in UTC (a moment of year 10000 in UTC is refused, whatever
its offset), and nothing reaches below a job's start: not a backfill, not the gap report."""

import pytest

from inventory.models import Backfill, Watermark, WatermarkType
from inventory.services.errors import InvalidInput
from inventory.services.watermarks import parse_value
from tests.support.api_support import make_inventory, token_client
from tests.support.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "value",
    ["9999-12-31T23:59:59-01:00", "0001-01-01T00:30:00+01:00"],
)
def test_a_datetime_is_checked_in_utc_a_moment_outside_years_1_to_9999_is_a_400(value, role_users):
    with pytest.raises(InvalidInput) as refused:
        parse_value(WatermarkType.DATETIME, value)
    assert refused.value.field == "value" and "in UTC" in refused.value.message
    # the same moment a minute earlier in UTC terms is fine
    assert parse_value(WatermarkType.DATETIME, "9999-12-31T22:59:59-01:00")

    job = make_job(watermark_type=WatermarkType.DATETIME)
    response = token_client(role_users["admin"]).post(
        f"/api/v1/jobs/{job.name}/watermark/",
        {"value": value, "position": 5, "reason": "pin"},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["value"] and "UTC" in response.json()["value"][0]
    assert Watermark.objects.get(job=job).value is None


def test_a_backfill_below_the_jobs_start_is_a_400_and_the_gap_report_starts_at_the_start(
    role_users,
):
    connector, _ = make_inventory(weights=[40] * 6)
    ids = list(connector.assets.order_by("id").values_list("id", flat=True))
    job = make_job(connector=connector, name="from-the-third", start_position=ids[2])
    api = token_client(role_users["operator"])
    for path, extra in (
        ("/api/v1/backfills/preview/", {}),
        ("/api/v1/backfills/", {"reason": "r"}),
    ):
        refused = api.post(
            path,
            {"job": job.name, "range_start": ids[0], "range_end": ids[3], **extra},
            format="json",
        )
        assert refused.status_code == 400, refused.content
        assert list(refused.json()) == ["range_start"]
        assert f"starts at item {ids[2]}" in refused.json()["range_start"][0]
    assert not Backfill.objects.filter(job=job).exists()
    fine = api.post(
        "/api/v1/backfills/",
        {"job": job.name, "range_start": ids[2], "range_end": ids[3], "reason": "r"},
        format="json",
    )
    assert fine.status_code == 201, fine.content

    # the gap report of a job that committed nothing lists no hole before its start, even when
    # asked from the first id
    report = api.get(f"/api/v1/jobs/{job.name}/gaps/", {"lower": ids[0]}).json()
    assert all(gap["range_start"] >= ids[2] for gap in report["gaps"]), report

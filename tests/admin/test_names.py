"""The admin names things by their names and shows a dash for nothing: a batch is "batch 7 of
orders-daily", not "batch 7 of job 2", and a watermark with no value yet is "—", not "None"."""

import pytest

from inventory.models import Batch, Watermark
from inventory.services import lifecycle
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


def test_admin_pages_show_names_and_dashes(client, role_users):
    job = make_job(connector=ConnectorFactory(name="landing"), name="orders-daily")
    make_assets(job.connector, [1, 1])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    watermark = Watermark.objects.get(job=job)
    assert str(watermark) == "watermark of orders-daily: —"
    assert str(Batch.objects.get(pk=batch.id)) == f"batch {batch.id} of orders-daily (running)"
    client.force_login(role_users["admin"])

    page = client.get(f"/admin/inventory/batch/{batch.id}/change/").content.decode()
    assert f"batch {batch.id} of orders-daily (running)" in page
    assert f"of job {job.pk}" not in page
    listing = client.get("/admin/inventory/watermark/").content.decode()
    assert "orders-daily" in listing
    assert ">None<" not in listing and "<td>None" not in listing
    assert "—" in listing  # the empty value and schedule are dashes
    jobs = client.get("/admin/inventory/job/").content.decode()
    assert ">None<" not in jobs

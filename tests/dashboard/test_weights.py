"""Weights on the dashboard and the admin in their connector's unit (models.weight_unit): a files
job's lag, budget, batches and backfill preview as sizes, a Kafka job's as message counts."""

import pytest
from django.test import Client

from inventory.models import ConnectorKind
from inventory.services import lifecycle
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db

MB = 1_000_000


def _client(user):
    client = Client()
    client.force_login(user)
    return client


def test_a_files_jobs_weights_are_sizes_everywhere(role_users):
    connector = ConnectorFactory(name="landing")
    assets = make_assets(connector, [300 * MB] * 4)
    job = make_job(connector=connector, name="files-job", batch_weight=600 * MB, max_items=5)
    client = _client(role_users["admin"])

    overview = client.get("/").content.decode()
    assert '4 items<br><span class="muted">weight 1.2 GB</span>' in overview
    page = client.get("/jobs/files-job/").content.decode()
    assert "budget weight 600 MB" in page
    assert "4 items, weight 1.2 GB" in page

    batch = lifecycle.batch_acquire(job=job, worker="w")
    assert "<td>600 MB</td>" in client.get("/jobs/files-job/batches/").content.decode()
    detail = client.get(f"/batches/{batch.id}/").content.decode()
    assert "2 items, weight 600 MB" in detail
    assert "<td>300 MB</td>" in detail  # each item

    # a backfill of the two items that no batch holds yet
    form = {"job": "files-job", "by": "ids", "range_start": assets[2].id}
    form.update(range_end=assets[3].id, max_concurrency=1, priority=0)
    preview = client.post("/backfills/preview/", form).content.decode()
    assert "1 batch(es), 2 items, total weight 600 MB" in preview
    assert "heaviest batch 600 MB (budget 600 MB)" in preview
    assert '<span class="lbl">540MB–600MB</span>' in preview  # the histogram's last bin
    assert client.post("/backfills/", {**form, "reason": "r"}).status_code == 302
    assert "0 B of 600 MB" in client.get("/backfills/").content.decode()

    correct = client.get(f"/admin/inventory/watermark/{job.watermark.pk}/correct/")
    assert "4 items, weight 1.2 GB" in correct.content.decode()


def test_a_kafka_jobs_weights_are_message_counts(role_users):
    connector = ConnectorFactory(
        name="topic",
        kind=ConnectorKind.KAFKA,
        config={"bootstrap_servers": "127.0.0.1:9", "topic": "t"},
    )
    make_assets(connector, [5000, 7000])
    make_job(connector=connector, name="kafka-job", batch_weight=10_000, watermark_type="key_value")
    page = _client(role_users["viewer"]).get("/jobs/kafka-job/").content.decode()
    assert "budget weight 10,000 messages" in page
    assert "2 items, weight 12,000 messages" in page

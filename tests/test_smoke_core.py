import pytest

from inventory.models import BatchStatus, Watermark
from inventory.services import batches
from tests.factories import ConnectorFactory, make_assets, make_job


@pytest.mark.django_db
def test_it_acquires_and_commits_a_batch_within_budget():
    connector = ConnectorFactory()
    assets = make_assets(connector, [40, 40, 40, 40])
    job = make_job(connector=connector, batch_weight=100, max_items=10)

    batch = batches.batch_acquire(job=job, worker="w1")
    assert (batch.item_count, batch.weight, batch.status) == (2, 80, BatchStatus.RUNNING)
    batches.batch_succeed(batch_id=batch.id, attempt=batch.attempt)

    watermark = Watermark.objects.get(job=job)
    assert watermark.value == assets[1].id

"""An Iceberg -> Iceberg chain (issue 46): job A writes an Iceberg table through the sink, an
`iceberg` connector reads A's snapshots, and job B writes them into a second Iceberg table. Every
snapshot of both tables is read by pyiceberg and DuckDB (tests/support/iceberg_tables.py):
no row is ever there twice, and after a replay of A (whose snapshot replaces A's superseded files,
an overwrite that restates the snapshots B read them from) B ends with each row once."""

import pytest

from inventory.models import Backfill, Batch, BatchStatus
from inventory.services import discovery
from inventory.services.connectors import connector_create
from inventory.services.corrections import watermark_correct
from inventory.services.jobs import job_create
from tests.support.files_job import drain, expected_rows, make_files_job
from tests.support.iceberg_tables import (
    assert_each_row_at_most_once_at_every_snapshot,
    assert_each_row_exactly_once_at_every_snapshot,
    iceberg_sink,
    latest_rows,
    load,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_iceberg_to_iceberg_chain_holds_each_row_once_at_every_snapshot_of_both(spark, tmp_path):
    upstream = iceberg_sink(tmp_path, table="a.t")
    job_a, _ = make_files_job(tmp_path, "chain-a", upstream, items=4, max_items=2)
    drain(spark, job_a)
    assert_each_row_exactly_once_at_every_snapshot(upstream, items=4)

    source = connector_create(
        name="chain-b-src",
        kind="iceberg",
        config={"catalog_uri": upstream["catalog_uri"], "table": "a.t"},
    )
    downstream = iceberg_sink(tmp_path, table="b.t")
    job_b = job_create(
        name="chain-b",
        connector=source,
        batch_weight=10**12,
        max_items=1,
        sink=downstream,
        retry_backoff_seconds=0,
        max_attempts=10,
    )
    discovery.discover(source)
    drain(spark, job_b)
    # one batch of B per snapshot of A, each adding that snapshot's rows once
    assert len(load(downstream).snapshots()) == len(load(upstream).snapshots()) == 2
    assert_each_row_exactly_once_at_every_snapshot(downstream, items=4)

    # A's second batch replayed: A's new snapshot replaces its files, B rebuilds what they held
    second = Batch.objects.filter(job=job_a, status=BatchStatus.SUCCEEDED).order_by("span")[1]
    watermark_correct(job=job_a, value=second.span.lower - 1, actor="a", reason="fix", replay=True)
    drain(spark, job_a)
    assert latest_rows(upstream) == expected_rows(range(4))
    discovery.discover(source)
    drain(spark, job_b)

    assert_each_row_at_most_once_at_every_snapshot(upstream)
    assert_each_row_at_most_once_at_every_snapshot(downstream)
    assert latest_rows(downstream) == latest_rows(upstream) == expected_rows(range(4))
    assert len(load(downstream).snapshots()) > 2
    # B's rebuild came from the restatement A's overwrite raised, not from a person
    assert Backfill.objects.filter(job=job_b, created_by="tidemark").exists()

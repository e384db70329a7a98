"""Restatements go first with a real Celery worker (issue 43, item 1): a Delta chain source -> A
-> B whose source deletes, updates, overwrites a partition, compacts and deletes again. After each
change discovery registers the version and the worker is nudged at once, racing the restatement
step that follows; every version of A and of B, read with delta-rs and DuckDB, holds the rows of
one version of the source, each once."""

import time

import pytest
from deltalake import DeltaTable

from inventory.models import Backfill, Batch, Connector
from inventory.services import dispatch, restatements
from inventory.sources import delta as delta_source
from tests.support.restated_delta import (
    _assert_every_version,
    _changes,
    _delta_rows,
    _job,
    _seed,
    _source_rows,
)
from tests.support.worker_fixtures import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _idle(job) -> bool:
    return not (
        Batch.objects.filter(job=job, status__in=["queued", "running", "failed"]).exists()
        or Backfill.objects.filter(job=job, status="running").exists()
    )


def _settle(job, expected) -> None:
    """Nudge the worker until the job is idle and its sink holds `expected`."""

    def done():
        if not _idle(job):
            return False
        if DeltaTable.is_deltatable(job.sink["path"]) and (
            _delta_rows(job.sink["path"], None) == expected()
        ):
            return True
        dispatch.nudge(job.pk)
        time.sleep(0.5)
        return False

    dispatch.nudge(job.pk)
    wait_until(done, timeout=120, message=f"job {job.name} to catch up")


def _race(job, expected) -> None:
    connector = Connector.objects.get(pk=job.connector_id)
    delta_source.discover(connector)  # the version is registered ...
    dispatch.nudge(job.pk)  # ... a worker is told at once ...
    restatements.delta_restate(Connector.objects.get(pk=job.connector_id))  # ... then this step
    _settle(job, expected)


def test_a_worker_never_publishes_a_delta_chain_row_twice_at_any_version(
    spark, tmp_path, celery_worker
):
    source, a, b = str(tmp_path / "s"), tmp_path / "a", tmp_path / "b"
    _seed(source)
    up = _job("wk-order-a", source, {"kind": "delta", "path": str(a)})
    _race(up, lambda: _source_rows(source))
    down = _job("wk-order-b", str(a), {"kind": "delta", "path": str(b)})
    _race(down, lambda: _source_rows(source))

    def step():
        _race(up, lambda: _source_rows(source))
        _race(down, lambda: _source_rows(source))

    _changes(source, step)
    for table in (a, b):
        # each row once at every version, and once the rows of the untouched partition arrived
        # they stay (delta-rs and DuckDB agreeing): a restatement whose restating version a
        # worker already took takes that batch over, so the rebuilt outputs and the rows that
        # replace them publish together (docs/guarantees.md, "Restatements go first")
        _assert_every_version(table)
    assert Batch.objects.filter(job=down, backfill__created_by="tidemark").exists()

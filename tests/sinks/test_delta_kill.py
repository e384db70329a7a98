"""kill -9 around the Delta commit (issue 22): a files-to-Delta and a Kafka-to-Delta job whose
worker dies after writing its files, once before the Delta commit and once after it (before the
control plane recorded the publish), then replayed and backfilled, still show each source row
once at every Delta version.

The worker is paused at the exact step by a row lock this test holds in PostgreSQL, and the test
waits on facts (the batch's files on disk, the worker's fence waiting for that lock), not clocks:
- before the commit: the test holds the job's watermark row, which tidemark_publish_begin locks
  first, so the worker has written its files and waits to publish;
- after the commit: the test holds the row of the batch being replaced, which only
  tidemark_publish_end updates, so the worker has committed to Delta and waits to record it.
"""

import os
import signal
import uuid

import pytest
from deltalake import DeltaTable

from inventory.models import Asset, Batch, BatchStatus, Watermark
from inventory.services import dispatch
from inventory.services.backfills import backfill_create
from inventory.services.connectors import connector_create
from inventory.services.corrections import watermark_correct
from inventory.services.discovery import discover
from tests.chaos.conftest import drive, worker_pid
from tests.support.delta_tables import assert_each_row_at_most_once_at_every_version, rows_at
from tests.support.factories import make_job
from tests.support.fence_locks import _fence_waiting, _hold, _running
from tests.support.files_job import expected_rows, make_files_job
from tests.support.worker_fixtures import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def own_queue(worker_env) -> str:
    return f"tidemark-delta-kill-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def own_worker(worker_env, own_queue, worker_log_dir):
    """One worker on a queue of this module's own, for both tests: a kill ends a pool process,
    whose replacement starts a new JVM, while the worker itself stays (a worker start, celery
    and a JVM, less per test)."""
    worker = WorkerProcess(
        env={**worker_env, "CELERY_QUEUE": own_queue},
        queue=own_queue,
        name="delta-kill",
        log_dir=worker_log_dir,
    )
    yield worker.start()
    worker.stop()


@pytest.fixture(autouse=True)
def _sent_to_own_queue(own_queue):
    """What a test of this module sends goes to the module's worker only."""
    from controlplane.celery import app

    previous = app.conf.CELERY_TASK_DEFAULT_QUEUE
    app.conf.CELERY_TASK_DEFAULT_QUEUE = own_queue
    yield
    app.conf.CELERY_TASK_DEFAULT_QUEUE = previous


def _files_of(out, batch_id: int, attempt: int) -> list:
    return list(out.glob(f"tidemark-b{batch_id}-a{attempt}-*/*.parquet"))


def test_a_worker_killed_before_and_after_the_delta_commit_leaves_each_row_once(
    tmp_path, own_worker
):
    out = tmp_path / "delta"
    job, _ = make_files_job(
        tmp_path, "delta-kill", {"kind": "delta", "path": str(out)}, items=4, max_items=4
    )
    job.lease_seconds = 3
    job.save(update_fields=["lease_seconds"])

    # 1. killed after writing its files, before the Delta commit
    held = _hold("SELECT 1 FROM inventory_watermark WHERE job_id = %s FOR UPDATE", [job.pk])
    try:
        dispatch.job_run(job=job)
        batch = wait_until(lambda: _running(job), timeout=60, message="the batch to run")
        wait_until(lambda: _files_of(out, batch.pk, 1), timeout=120, message="its files")
        wait_until(lambda: _fence_waiting("tidemark_publish_begin"), timeout=60, message="fence")
        os.kill(worker_pid(batch), signal.SIGKILL)
    finally:
        held.rollback()
        held.close()
    assert not (out / "_delta_log").exists()  # the files are there, no reader sees them
    drive(
        lambda: Batch.objects.filter(job=job, status=BatchStatus.SUCCEEDED).exists(),
        timeout=240,
        jobs=[job],
        message="the retry after the kill before the commit",
    )
    assert Batch.objects.get(pk=batch.pk).attempt >= 2
    assert rows_at(out) == expected_rows(range(4))
    assert DeltaTable(str(out)).version() == 0  # the killed attempt never committed

    # 2. a replay whose worker is killed after the Delta commit, before the fence commits
    watermark_correct(
        job=job, value=batch.span.lower - 1, actor="a", reason="kill test", replay=True
    )
    held = _hold("SELECT 1 FROM inventory_batch WHERE id = %s FOR UPDATE", [batch.pk])
    try:
        dispatch.job_run(job=job)
        replay = wait_until(lambda: _running(job), timeout=60, message="the replay to run")
        wait_until(
            lambda: DeltaTable(str(out)).version() == 1, timeout=120, message="its Delta commit"
        )
        wait_until(lambda: _fence_waiting("tidemark_publish_end"), timeout=60, message="fence")
        os.kill(worker_pid(replay), signal.SIGKILL)
    finally:
        held.rollback()
        held.close()
    # committed to Delta, not to the control plane: the replaced output left in that same commit
    assert rows_at(out, 1) == expected_rows(range(4))
    drive(
        lambda: Batch.objects.filter(pk=replay.pk, status=BatchStatus.SUCCEEDED).exists(),
        timeout=240,
        jobs=[job],
        message="the replay's retry after the kill after the commit",
    )
    assert Batch.objects.get(pk=replay.pk).attempt >= 2
    assert Batch.objects.get(pk=batch.pk).replaced_by_id == replay.pk
    assert DeltaTable(str(out)).version() == 2
    assert_each_row_at_most_once_at_every_version(out)
    assert rows_at(out) == expected_rows(range(4))


# ---- Kafka to Delta ----------------------------------------------------------------------------


def _messages_at(out, version=None) -> list[tuple[int, int]]:
    """(partition, offset) of every row of the table at `version`, sorted, duplicates kept."""
    table = DeltaTable(str(out), version=version).to_pyarrow_table()
    return sorted(
        zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
    )


def _live_files(out, version=None) -> set[str]:
    """The data files the table's log names at `version`, relative to the table."""
    actions = DeltaTable(str(out), version=version).get_add_actions(flatten=True)
    return set(actions.column("path").to_pylist())


def _caught_up(job) -> bool:
    """Every offset committed and nothing left queued, running or failed."""
    live = Batch.objects.filter(job=job).exclude(status=BatchStatus.SUPERSEDED)
    return (
        Watermark.objects.get(job=job).value == {"0": 6, "1": 6}
        and not live.exclude(status=BatchStatus.SUCCEEDED).exists()
    )


def test_a_kafka_to_delta_job_killed_around_the_commit_replayed_and_backfilled_keeps_each_message_once(
    tmp_path, own_worker, kafka_broker
):
    topic = kafka_broker.create_topic(partitions=2)
    kafka_broker.produce(topic, [(p, f"m{n}".encode()) for p in (0, 1) for n in range(6)])
    everything = [(p, o) for p in (0, 1) for o in range(6)]
    connector = connector_create(
        name="kafka-delta-src",
        kind="kafka",
        config={"bootstrap_servers": kafka_broker.bootstrap, "topic": topic, "slice_messages": 3},
    )
    assert discover(connector) == 4  # two slices of 3 offsets per partition
    out = tmp_path / "delta"
    job = make_job(
        connector=connector,
        name="kafka-delta",
        watermark_type="key_value",
        batch_weight=100,
        max_items=2,
        sink={"kind": "delta", "path": str(out)},
        retry_backoff_seconds=0,
        max_attempts=100,
        lease_seconds=3,
    )

    # 1. the first batch is killed after writing its files, while it waits to publish
    held = _hold("SELECT 1 FROM inventory_watermark WHERE job_id = %s FOR UPDATE", [job.pk])
    try:
        dispatch.job_run(job=job)
        batch = wait_until(lambda: _running(job), timeout=60, message="the batch to run")
        wait_until(lambda: _files_of(out, batch.pk, 1), timeout=120, message="its files")
        wait_until(lambda: _fence_waiting("tidemark_publish_begin"), timeout=60, message="fence")
        os.kill(worker_pid(batch), signal.SIGKILL)
    finally:
        held.rollback()
        held.close()
    assert not (out / "_delta_log").exists()  # its files are written, no reader sees them
    drive(lambda: _caught_up(job), timeout=240, jobs=[job], message="the batches")
    assert Batch.objects.get(pk=batch.pk).attempt >= 2
    assert _messages_at(out) == everything
    assert DeltaTable(str(out)).version() == 1  # two batches, the killed attempt never committed
    killed = {f.relative_to(out).as_posix() for f in _files_of(out, batch.pk, 1)}
    assert killed and not killed & _live_files(out)  # orphans, never named

    # 2. a replay of everything; its first batch is killed after its Delta commit, while the
    #    control plane's fence waits to record the publish
    version = DeltaTable(str(out)).version()
    watermark_correct(job=job, position=batch.span.lower, actor="a", reason="kill", replay=True)
    held = _hold("SELECT 1 FROM inventory_batch WHERE id = %s FOR UPDATE", [batch.pk])
    try:
        dispatch.job_run(job=job)
        replay = wait_until(lambda: _running(job), timeout=60, message="the replay to run")
        wait_until(
            lambda: DeltaTable(str(out)).version() == version + 1,
            timeout=120,
            message="the replay's Delta commit",
        )
        wait_until(lambda: _fence_waiting("tidemark_publish_end"), timeout=60, message="fence")
        os.kill(worker_pid(replay), signal.SIGKILL)
    finally:
        held.rollback()
        held.close()
    # in Delta, not in the control plane: the replaced output left in that same commit
    assert _messages_at(out, version + 1) == everything
    drive(lambda: _caught_up(job), timeout=240, jobs=[job], message="the replay")
    assert Batch.objects.get(pk=replay.pk).attempt >= 2
    assert Batch.objects.get(pk=batch.pk).replaced_by_id == replay.pk
    assert _messages_at(out) == everything
    # the killed attempt's files were live at that version; its retry's commit removed them
    killed = {f.relative_to(out).as_posix() for f in _files_of(out, replay.pk, 1)}
    assert killed and killed <= _live_files(out, version + 1)
    assert not killed & _live_files(out)

    # 3. a backfill over every committed slice
    ids = list(
        Asset.objects.filter(connector=connector).order_by("id").values_list("id", flat=True)
    )
    backfill = backfill_create(job=job, range_start=ids[0], range_end=ids[-1], reason="rewrite")
    drive(
        lambda: backfill.batches.exists()
        and not backfill.batches.exclude(status=BatchStatus.SUCCEEDED).exists(),
        timeout=240,
        jobs=[job],
        message="the backfill",
    )

    assert_each_row_at_most_once_at_every_version(out, columns=("partition", "offset"))
    assert _messages_at(out) == everything
    history = DeltaTable(str(out)).history()
    assert len([h for h in history if h.get("tidemark", {}).get("replaced")]) >= 3

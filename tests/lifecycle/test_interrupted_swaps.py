"""A worker killed in the middle of a files sink's swap: some committed outputs moved aside under
`_staging`, perhaps its own output already in its place, and its fence rolled back with its
connection. The control plane still records the outputs it moved as the ones shown, so the next
publish of the job puts them back inside its fence, and takes away what the killed attempt put in
place (workers/spark/sinks.py, `_tidy_staging`)."""

import shutil
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import pytest

from inventory.models import Asset, Backfill, Batch, BatchStatus
from inventory.services import lifecycle
from inventory.services.backfills import backfill_create, backfill_set_status
from tests.support.files_job import (
    drain,
    expected_rows,
    expire_and_reap,
    land_item,
    make_files_job,
    run_and_commit,
    run_spark,
    sink_rows,
)
from workers.spark import fence, sinks
from workers.spark.errors import BatchError
from workers.spark.sink_files import HadoopFiles

pytestmark = pytest.mark.django_db(transaction=True)


class Killed(BaseException):
    """The worker process dies: nothing after this point runs in it."""


def _killed_at(monkeypatch, operation: str, count: int) -> None:
    """The sink's next files make `count` calls of `operation` ("rename" or "delete"), then the
    process is gone: the fence's connection closes (its transaction rolls back, if it had not
    committed) and nothing else the sink would do runs."""
    real = sinks.sink_files
    state = {"calls": 0, "dead": False}

    def dying(call):
        def run(*args):
            if state["dead"]:
                return True
            done = call(*args)
            if call.__name__ == operation:
                state["calls"] += 1
                if state["calls"] == count:
                    state["dead"] = True
                    raise Killed
            return done

        return run

    class Dying:
        def __init__(self, files):
            self._files = files
            self.rename = dying(files.rename)
            self.delete = dying(files.delete)

        def __getattr__(self, name):
            return getattr(self._files, name)

    monkeypatch.setattr(sinks, "sink_files", lambda spark, path: Dying(real(spark, path)))


def _run_killed(spark, monkeypatch, batch: Batch, renames: int, *, deletes: int = 0) -> None:
    with monkeypatch.context() as patch:
        _killed_at(patch, "delete", deletes) if deletes else _killed_at(patch, "rename", renames)
        with pytest.raises(Killed):
            run_spark(spark, batch)
    published = Batch.objects.get(pk=batch.pk).published_attempt
    assert (published == batch.attempt) == bool(deletes)  # a kill after the fence's commit
    expire_and_reap(batch)


def _asides(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "_staging").glob("replaced-*"))


def _batch_dirs(out: Path) -> list[int]:
    return sorted(int(p.name.split("=", 1)[1]) for p in out.glob("batch_id=*"))


def _add_items(job, items) -> None:
    landing = Path(Asset.objects.filter(connector=job.connector).first().location).parent
    for item in items:
        land_item(job.connector, landing, item)


def _backfill_over_two_committed(spark, tmp_path, name: str):
    """A files job of 6 items in 3 committed batches, and a backfill of one batch (as a
    restatement plans it) over the first two, acquired: (out, sink, job, committed, backfill,
    the backfill's batch)."""
    out = tmp_path / "out"
    sink = {"kind": "files", "path": str(out)}
    job, item_of = make_files_job(tmp_path, name, sink, items=6)
    drain(spark, job)
    committed = list(Batch.objects.filter(job=job).order_by("span"))
    assert [b.status for b in committed] == [BatchStatus.SUCCEEDED] * 3
    ids = sorted(item_of)
    backfill = backfill_create(job=job, range_start=ids[0], range_end=ids[3], whole=True)
    assert backfill.batches.count() == 1
    mover = lifecycle.batch_acquire(job=job, worker="doomed")
    assert mover.backfill_id == backfill.pk
    return out, sink, job, committed, backfill, mover


# renames of a backfill batch over two committed batches: the first one's output aside, the
# second one's, then its own output into place
@pytest.mark.parametrize(
    ("renames", "seen_meanwhile"),
    [(1, [2, 3, 4, 5]), (2, [4, 5]), (3, [0, 1, 2, 3, 4, 5])],
)
@pytest.mark.parametrize("then", ["cancelled", "retried"])
def test_a_swap_killed_half_way_is_undone_by_the_next_publish_of_the_job(
    spark, tmp_path, monkeypatch, renames, seen_meanwhile, then
):
    out, sink, job, committed, backfill, mover = _backfill_over_two_committed(
        spark, tmp_path, f"swap-{renames}-{then[:3]}"
    )

    _run_killed(spark, monkeypatch, mover, renames)
    # what readers see until the job publishes again: the rows of the outputs moved aside are
    # missing, or the killed attempt's own output stands in for them; never a row twice
    assert sink_rows(spark, sink) == expected_rows(seen_meanwhile)
    assert len(_asides(out)) == min(renames, 2)

    if then == "cancelled":
        backfill_set_status(backfill=Backfill.objects.get(pk=backfill.pk), status="cancelled")
        assert Batch.objects.get(pk=mover.pk).status == BatchStatus.CANCELLED
        _add_items(job, [6, 7])  # the job's next publish is a new incremental batch's
        drain(spark, job)
        newest = Batch.objects.filter(job=job).order_by("-span").first()
        assert newest.published_attempt is not None and newest.pk != mover.pk
        # the outputs recorded as shown are back in their places, the killed attempt's is gone
        assert sink_rows(spark, sink) == expected_rows(range(8))
        assert _batch_dirs(out) == sorted([*(b.pk for b in committed), newest.pk])
    else:
        drain(spark, job)  # the killed batch's retry publishes
        done = Batch.objects.get(pk=mover.pk)
        assert done.status == BatchStatus.SUCCEEDED and done.attempt == 2
        assert sink_rows(spark, sink) == expected_rows(range(6))
        assert _batch_dirs(out) == sorted([mover.pk, committed[2].pk])
        for replaced in committed[:2]:
            assert Batch.objects.get(pk=replaced.pk).replaced_by_id == mover.pk
    assert _asides(out) == []


def test_a_retry_whose_earlier_output_was_moved_aside_by_a_killed_attempt_keeps_it_until_it_publishes(
    spark, tmp_path, monkeypatch
):
    """The batch's own earlier output (published, then the worker died before its commit): the
    killed retry moved it aside and put its own in place; the next retry puts it back first, then
    swaps as usual."""
    out = tmp_path / "out"
    sink = {"kind": "files", "path": str(out)}
    job, _ = make_files_job(tmp_path, "swap-own", sink, items=2)
    batch = lifecycle.batch_acquire(job=job, worker="w1")
    run_spark(spark, batch)  # published; the worker dies before it commits the batch
    expire_and_reap(batch)
    assert Batch.objects.get(pk=batch.pk).published_attempt == 1
    second = lifecycle.batch_acquire(job=job, worker="w2")
    assert (second.pk, second.attempt) == (batch.pk, 2)

    _run_killed(spark, monkeypatch, second, renames=2)
    assert _asides(out) == [f"replaced-batch_id={batch.pk}-by-{batch.pk}-a2-" + _token(out)]
    assert sink_rows(spark, sink) == expected_rows(range(2))  # attempt 2's, never recorded

    drain(spark, job)
    done = Batch.objects.get(pk=batch.pk)
    assert (done.status, done.attempt, done.published_attempt) == (BatchStatus.SUCCEEDED, 3, 3)
    assert sink_rows(spark, sink) == expected_rows(range(2))
    assert _batch_dirs(out) == [batch.pk]
    assert _asides(out) == []


def _token(out: Path) -> str:
    (aside,) = _asides(out)
    return aside.rsplit("-", 1)[1]


def test_a_worker_killed_after_its_fence_committed_leaves_asides_the_next_publish_deletes(
    spark, tmp_path, monkeypatch
):
    """The swap took effect (the fence committed) and the worker died deleting what it had moved
    aside: those go, and nothing comes back; the killed batch's output stays in its place."""
    out, sink, job, committed, backfill, mover = _backfill_over_two_committed(
        spark, tmp_path, "swap-after"
    )
    _run_killed(spark, monkeypatch, mover, renames=0, deletes=1)
    assert len(_asides(out)) == 1  # one of the two deleted before the worker died
    assert sink_rows(spark, sink) == expected_rows(range(6))

    # no retry of the killed batch: its published output is the one recorded
    backfill_set_status(backfill=Backfill.objects.get(pk=backfill.pk), status="cancelled")
    _add_items(job, [6, 7])
    drain(spark, job)  # the job's next publish is a new incremental batch's
    assert sink_rows(spark, sink) == expected_rows(range(8))
    assert mover.pk in _batch_dirs(out)
    assert not set(_batch_dirs(out)) & {b.pk for b in committed[:2]}
    assert _asides(out) == []


def test_the_undo_works_through_hadoops_file_system_too(spark, tmp_path, monkeypatch):
    """Object stores and HDFS go through Hadoop's FileSystem (sink_files.HadoopFiles): the same
    killed swap and undo, with every file operation made through it (here on the local disk)."""
    monkeypatch.setattr(sinks, "sink_files", HadoopFiles)
    out, sink, job, committed, backfill, mover = _backfill_over_two_committed(
        spark, tmp_path, "swap-hadoop"
    )
    _run_killed(spark, monkeypatch, mover, renames=3)
    assert len(_asides(out)) == 2 and mover.pk in _batch_dirs(out)

    backfill_set_status(backfill=Backfill.objects.get(pk=backfill.pk), status="cancelled")
    _add_items(job, [6, 7])
    drain(spark, job)
    newest = Batch.objects.filter(job=job).order_by("-span").first()
    assert sink_rows(spark, sink) == expected_rows(range(8))
    assert _batch_dirs(out) == sorted([*(b.pk for b in committed), newest.pk])
    assert _asides(out) == []


def test_a_publish_drops_the_staging_of_attempts_that_can_no_longer_publish_and_keeps_live_ones(
    spark, tmp_path
):
    """Another batch's publish, inside its fence, drops what a dead attempt of the job left in
    `_staging/` and keeps what a running attempt is writing there."""
    out = tmp_path / "out"
    sink = {"kind": "files", "path": str(out)}
    job, _ = make_files_job(tmp_path, "staging-tidy", sink, items=4)
    first = lifecycle.batch_acquire(job=job, worker="w1")
    expire_and_reap(first)
    retry = lifecycle.batch_acquire(job=job, worker="w2")
    assert (retry.pk, retry.attempt) == (first.pk, 2)
    dead = out / "_staging" / f"batch_id={first.pk}-a1-0123456789ab"  # the killed attempt's
    live = out / "_staging" / f"batch_id={first.pk}-a2-ba9876543210"  # being written now
    for staged in (dead, live):
        staged.mkdir(parents=True)
        (staged / "part-0.parquet").write_bytes(b"not yet")

    second = lifecycle.batch_acquire(job=job, worker="w3")
    assert second.pk != first.pk
    run_and_commit(spark, second)
    assert not dead.exists() and live.exists()

    shutil.rmtree(live)  # attempt 2's real write takes its place
    run_and_commit(spark, retry)
    assert sink_rows(spark, sink) == expected_rows(range(4))
    assert list((out / "_staging").iterdir()) == []


@pytest.mark.parametrize("commit", ["rolled back", "landed"])
def test_a_fence_that_fails_at_its_end_leaves_the_swap_to_the_next_publish(
    spark, tmp_path, monkeypatch, commit
):
    """The fence fails once the swap is done: its transaction rolled back (a lost connection), or
    its commit landed and only the answer was lost. The worker cannot tell which, and by then the
    job's lock is gone, so it undoes nothing itself: the next publish decides, inside its fence,
    by what the control plane recorded."""
    out, sink, job, committed, _backfill, mover = _backfill_over_two_committed(
        spark, tmp_path, f"fence-end-{commit[:4]}"
    )
    real = fence.database_publish

    def failing_at_the_end(**kwargs):
        publish = real(**kwargs)

        @contextmanager
        def failing():
            with publish() as replaced:
                yield replaced
                if commit == "rolled back":
                    raise psycopg2.OperationalError("server closed the connection unexpectedly")
            raise psycopg2.OperationalError("server closed the connection unexpectedly")

        return failing

    with monkeypatch.context() as patch:
        patch.setattr(fence, "database_publish", failing_at_the_end)
        with pytest.raises(BatchError):
            run_spark(spark, mover)
    recorded = Batch.objects.get(pk=mover.pk).published_attempt
    assert recorded == (1 if commit == "landed" else None)
    assert len(_asides(out)) == 2 and mover.pk in _batch_dirs(out)  # left as the swap left it
    assert sink_rows(spark, sink) == expected_rows(range(6))

    expire_and_reap(mover)
    drain(spark, job)  # the batch's retry publishes
    assert sink_rows(spark, sink) == expected_rows(range(6))
    assert _batch_dirs(out) == sorted([mover.pk, committed[2].pk])
    assert _asides(out) == []

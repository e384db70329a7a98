"""Several batches at once in one SparkSession: each in its own slot, pool and job tag, so a lost
lease or a time limit stops that batch's Spark jobs and no other's."""

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tests.support.worker_processors  # noqa: F401 - registers test_slow_rows
from workers.spark.errors import BatchError
from workers.spark.slots import BatchSlots, run_batch_in_slot


def _spec(tmp_path, name, batch_id, rows, row_seconds=0.05):
    source = tmp_path / f"{name}.parquet"
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), source)
    return {
        "job": name,
        "batch_id": batch_id,
        "attempt": 1,
        "lower": batch_id,
        "upper": batch_id + 1,
        "items": [str(source)],
        "format": "parquet",
        "processor": "test_slow_rows",
        "params": {"marker": str(tmp_path / f"{name}.times"), "row_seconds": row_seconds},
        "sink": {"kind": "files", "path": str(tmp_path / f"out-{name}")},
    }


def _times(tmp_path, name):
    path = tmp_path / f"{name}.times"
    return [float(line) for line in path.read_text().split()] if path.exists() else []


class Run(threading.Thread):
    def __init__(self, spark, spec, slots, **options):
        super().__init__(daemon=True)
        self.args = (spark, spec)
        self.options = {"slots": slots, "cancel": threading.Event(), **options}
        self.result = self.error = None
        self.seconds = None

    def run(self):
        started = time.monotonic()
        try:
            self.result = run_batch_in_slot(*self.args, **self.options)
        except BatchError as exc:
            self.error = exc
        self.seconds = time.monotonic() - started


def _wait_for(predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_two_batches_of_different_jobs_run_at_the_same_time_in_one_session(spark, tmp_path):
    slots = BatchSlots(2)
    a = Run(spark, _spec(tmp_path, "a", 1, rows=20), slots)
    b = Run(spark, _spec(tmp_path, "b", 2, rows=20), slots)
    a.start(), b.start()
    a.join(120), b.join(120)
    assert (a.error, b.error) == (None, None)
    assert (a.result["rows_out"], b.result["rows_out"]) == (20, 20)
    ta, tb = _times(tmp_path, "a"), _times(tmp_path, "b")
    assert max(ta[0], tb[0]) < min(ta[-1], tb[-1])  # their Spark work overlapped
    assert slots.running() == 0


def test_a_lost_lease_cancels_only_its_own_batchs_spark_jobs(spark, tmp_path):
    slots = BatchSlots(2)
    lost = Run(spark, _spec(tmp_path, "lost", 3, rows=400), slots)
    kept = Run(spark, _spec(tmp_path, "kept", 4, rows=40), slots)
    lost.start(), kept.start()
    _wait_for(lambda: _times(tmp_path, "lost") and _times(tmp_path, "kept"))
    lost.options["cancel"].set()
    lost.join(60), kept.join(120)
    assert lost.error is not None and lost.error.type == "LeaseLost"
    assert lost.seconds < 400 * 0.05  # stopped, not run to its end
    assert not (tmp_path / "out-lost" / "batch_id=3").exists()  # nothing published
    assert kept.error is None and kept.result["rows_out"] == 40
    rows = spark.read.parquet(kept.result["location"]).count()
    assert rows == 40
    assert slots.running() == 0


def test_a_batch_past_its_time_limit_is_cancelled(spark, tmp_path):
    run = Run(spark, _spec(tmp_path, "long", 5, rows=400), BatchSlots(1), time_limit=1)
    run.start()
    run.join(60)
    assert run.error is not None and run.error.type == "TimeLimitExceeded"
    assert run.seconds < 400 * 0.05


def test_with_one_slot_batches_take_turns(spark, tmp_path):
    slots = BatchSlots(1)
    first = Run(spark, _spec(tmp_path, "first", 6, rows=10), slots)
    second = Run(spark, _spec(tmp_path, "second", 7, rows=10), slots)
    first.start()
    _wait_for(lambda: _times(tmp_path, "first"))
    second.start()
    first.join(60), second.join(60)
    assert (first.error, second.error) == (None, None)
    assert _times(tmp_path, "first")[-1] < _times(tmp_path, "second")[0]


def test_a_lease_lost_while_waiting_for_a_slot_ends_the_wait(spark, tmp_path):
    slots = BatchSlots(1)
    busy = Run(spark, _spec(tmp_path, "busy", 8, rows=60), slots)
    waiting = Run(spark, _spec(tmp_path, "waiting", 9, rows=10), slots)
    busy.start()
    _wait_for(lambda: _times(tmp_path, "busy"))
    waiting.start()
    time.sleep(0.5)
    waiting.options["cancel"].set()
    waiting.join(10)
    assert waiting.error is not None and waiting.error.type == "LeaseLost"
    assert _times(tmp_path, "waiting") == []
    busy.join(60)
    assert busy.error is None


@pytest.mark.parametrize("limit", [0, -1])
def test_a_worker_runs_at_least_one_batch_at_a_time(limit):
    with pytest.raises(ValueError):
        BatchSlots(limit)


def _pool_of_a_job(spark):
    """The scheduler pool the Spark job started now on this thread runs in (from its task)."""
    from pyspark import TaskContext

    rdd = spark.sparkContext.parallelize([0], 1)
    return rdd.map(lambda _: TaskContext.get().getLocalProperty("spark.scheduler.pool")).first()


def test_a_threads_jobs_run_in_its_current_slots_pool(spark):
    # the pool is set again only when the thread's slot changes: each batch's jobs still run in
    # the pool of the slot it holds
    slots = BatchSlots(2)
    cancel = threading.Event()
    seen = []
    for _ in range(2):
        with slots.slot(spark, tag="tidemark-batch-1-a1", cancel=cancel) as pool:
            seen.append((pool, _pool_of_a_job(spark)))
    held, release = threading.Event(), threading.Event()

    def hold_slot():
        with slots.slot(spark, tag="tidemark-batch-2-a1", cancel=cancel):
            held.set()
            release.wait(30)

    other = threading.Thread(target=hold_slot, daemon=True)
    other.start()
    assert held.wait(30)
    try:
        with slots.slot(spark, tag="tidemark-batch-3-a1", cancel=cancel) as pool:
            seen.append((pool, _pool_of_a_job(spark)))
    finally:
        release.set()
        other.join(30)
    assert seen == [
        ("tidemark-0", "tidemark-0"),
        ("tidemark-0", "tidemark-0"),
        ("tidemark-1", "tidemark-1"),
    ]

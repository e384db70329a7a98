"""Whole histories of one job against a reference model (issue 8): random interleavings of
incremental runs, killed attempts (before and after their output was published), stale attempts
waking up, replays after backward corrections and backfills over committed items, for a file
sink and a PostgreSQL sink in each mode (append, upsert, coalesce), on real PostgreSQL and the session's SparkSession.

The model: a source row is written by at most one batch at any moment (never twice), and once the
job is drained every source row is in the sink exactly once and the watermark is the end of the
contiguous committed prefix (every item).
"""

import itertools
from collections import Counter

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.models import Batch, BatchKind, BatchStatus, Watermark
from inventory.services import lifecycle
from inventory.services.backfills import backfill_create
from inventory.services.corrections import watermark_correct
from inventory.services.errors import Conflict, InvalidInput
from tests.support.files_job import (
    drain,
    expected_rows,
    expire_and_reap,
    make_files_job,
    run_and_commit,
    run_spark,
    sink_rows,
)
from workers import specs
from workers.spark.errors import BatchError
from workers.spark.run import run_batch

pytestmark = pytest.mark.django_db(transaction=True)

ITEMS = 6
_names = itertools.count()

step = st.one_of(
    st.just(("run",)),
    st.just(("kill_before_publish",)),
    st.just(("kill_after_publish",)),
    st.just(("stale",)),
    st.tuples(st.just("replay"), st.integers(0, 10)),
    st.tuples(st.just("backfill"), st.integers(0, ITEMS - 1), st.integers(0, ITEMS - 1)),
)


def apply(spark, job, item_ids, action) -> None:
    kind = action[0]
    if kind in ("run", "kill_before_publish", "kill_after_publish", "stale"):
        batch = lifecycle.batch_acquire(job=job, worker="w")
        if batch is None:
            return
        if kind == "run":
            run_and_commit(spark, batch)
        elif kind == "kill_before_publish":
            expire_and_reap(batch)
        elif kind == "kill_after_publish":
            run_spark(spark, batch)
            expire_and_reap(batch)
        else:
            spec = specs.batch_spec(batch=batch)
            expire_and_reap(batch)
            again = lifecycle.batch_acquire(job=job, worker="w2")
            with pytest.raises(BatchError) as fenced:
                run_batch(spark, spec)
            assert fenced.value.type == "FencedOut"
            if again is not None:
                run_and_commit(spark, again)
    elif kind == "replay":
        committed = list(
            Batch.objects.filter(
                job=job, kind=BatchKind.INCREMENTAL, status=BatchStatus.SUCCEEDED
            ).values_list("span", flat=True)
        )
        if not committed:
            return
        boundary = sorted(span.lower for span in committed)[action[1] % len(committed)]
        try:
            watermark_correct(
                job=job, value=boundary - 1, actor="prop", reason="replay", replay=True
            )
        except (Conflict, InvalidInput):
            pass  # in flight after that point, or inside an output: refused, nothing changed
    else:
        first, last = sorted((item_ids[action[1]], item_ids[action[2]]))
        try:
            backfill_create(job=job, range_start=first, range_end=last, reason="prop")
        except Conflict:
            pass  # a batch is in flight there


def assert_never_twice(spark, sink) -> None:
    counts = Counter(sink_rows(spark, sink))
    assert all(n == 1 for n in counts.values()), counts.most_common(3)
    assert set(counts) <= set(expected_rows(range(ITEMS)))


@pytest.mark.parametrize("kind", ["files", "append", "upsert", "coalesce"])
def test_any_history_leaves_each_row_once_and_the_watermark_at_the_committed_prefix(
    spark,
    tmp_path_factory,
    sink_dsn,
    kind,
):
    @settings(
        max_examples=6,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(history=st.lists(step, min_size=1, max_size=6), max_items=st.integers(1, 3))
    def history_holds(history, max_items):
        name = f"h{next(_names)}"
        tmp = tmp_path_factory.mktemp(name)
        sink = (
            {"kind": "files", "path": str(tmp / "out")}
            if kind == "files"
            else {"kind": "postgres", "dsn_env": sink_dsn, "table": name, "mode": kind}
        )
        if kind in ("upsert", "coalesce"):
            sink["key"] = ["key"]
        job, item_of = make_files_job(tmp, name, sink, items=ITEMS, max_items=max_items)
        item_ids = sorted(item_of)
        for action in history:
            apply(spark, job, item_ids, action)
            assert_never_twice(spark, sink)
        # drain: failed batches come back (no backoff), backfills finish
        for _ in range(3):
            Batch.objects.filter(job=job, status=BatchStatus.FAILED).update(
                next_attempt_at=timezone.now()
            )
            drain(spark, job)
        assert sink_rows(spark, sink) == expected_rows(range(ITEMS))
        assert Watermark.objects.get(job=job).position == item_ids[-1] + 1

    history_holds()

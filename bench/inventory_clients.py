"""bench_inventory's clients: forked processes that acquire + succeed in a loop, for
Tidemark (batch_acquire / batch_succeed) and the hand-written SQL baseline."""

import queue as queue_module
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inventory_setup import K_PER_CALL, META, SQL_BATCHES, WARM_PAIRS  # noqa: E402


def run_clients(target, clients: int, spec: dict) -> dict:
    """Fork `clients` processes running target(index, spec, barrier, counters, queue); gather."""
    import multiprocessing as mp

    from django.db import connections

    connections.close_all()  # children open their own connections
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(clients)
    counters = ctx.Array("i", max(1, len(spec["jobs"])))
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(i, spec, barrier, counters, queue)) for i in range(clients)
    ]
    for proc in procs:
        proc.start()
    try:  # a client that dies without reporting must not hang the run
        results = [queue.get(timeout=spec["seconds"] + 300) for _ in procs]
    except queue_module.Empty:
        for proc in procs:
            proc.kill()
        raise RuntimeError("a benchmark client died without reporting") from None
    for proc in procs:
        proc.join()
    fatal = [r["fatal"] for r in results if "fatal" in r]
    if fatal:
        fatal.sort(key=lambda text: text.startswith("another client"))  # the cause first
        raise RuntimeError(f"a benchmark client failed:\n{fatal[0]}")
    errors: dict = {}
    for r in results:
        for name, count in r["errors"].items():
            errors[name] = errors.get(name, 0) + count
    return {
        "batches": sum(r["batches"] for r in results),
        "elapsed": max(r["elapsed"] for r in results),
        "acquire_s": [x for r in results for x in r["acquire_s"]],
        "succeed_s": [x for r in results for x in r["succeed_s"]],
        "conflicts": sum(r["conflicts"] for r in results),
        "errors": errors,
        "per_client": [r["batches"] for r in results],
    }


def _claim(counters, job_index: int, quota) -> bool:
    if quota is None:
        return True
    with counters.get_lock():
        if counters[job_index] >= quota:
            return False
        counters[job_index] += 1
        return True


def _unclaim(counters, job_index: int, quota) -> None:
    if quota is not None:
        with counters.get_lock():
            counters[job_index] -= 1


def client_loop(index, spec, barrier, counters, queue, warm_up, acquire, succeed):
    """The timed loop shared by the Tidemark and baseline clients (the peer has its own driver)."""
    try:
        state = warm_up(spec)
    except Exception:
        barrier.abort()
        queue.put({"index": index, "fatal": traceback.format_exc()})
        return
    quota = spec["quota"]
    acquire_s, succeed_s, errors = [], [], {}
    conflicts = done = 0
    try:
        _warm_session(state, spec, counters, acquire, succeed, f"bench-client-{index}")
    except Exception:
        barrier.abort()
        queue.put({"index": index, "fatal": traceback.format_exc()})
        return
    try:
        barrier.wait()
    except threading.BrokenBarrierError:  # another client failed to start
        queue.put({"index": index, "fatal": "another client failed before the start"})
        return
    started = time.perf_counter()
    deadline = started + spec["seconds"]
    for job_index, job in enumerate(spec["jobs"]):
        if time.perf_counter() >= deadline:
            break
        while time.perf_counter() < deadline:
            if not _claim(counters, job_index, quota):
                break
            t0 = time.perf_counter()
            try:
                batch = acquire(state, job, f"bench-client-{index}")
            except Conflicted:
                conflicts += 1
                _unclaim(counters, job_index, quota)
                continue
            except Exception as exc:  # counted and reported; the run goes on
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                _unclaim(counters, job_index, quota)
                continue
            t1 = time.perf_counter()
            if not batch:  # the job's items are exhausted (None, or no batch of several)
                _unclaim(counters, job_index, quota)
                break
            try:
                succeed(state, batch)
            except Exception as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            t2 = time.perf_counter()
            acquire_s.append(t1 - t0)
            succeed_s.append(t2 - t1)
            # a call of the k arm takes and commits a list of batches
            done += len(batch) if isinstance(batch, list) else 1
    queue.put(
        {
            "index": index,
            "batches": done,
            "elapsed": time.perf_counter() - started,
            "acquire_s": acquire_s,
            "succeed_s": succeed_s,
            "conflicts": conflicts,
            "errors": errors,
        }
    )


def _warm_session(state, spec, counters, acquire, succeed, worker) -> None:
    """WARM_PAIRS untimed pairs before the start, the same for every system: a worker keeps its
    database session, so its statements are compiled and their plans cached (PostgreSQL plans a
    cached statement anew for its first 5 runs); a 1 s slice in a fresh process would otherwise
    time session start-up rather than the calls. They take batches from the same jobs and quotas
    (the checks count them), and a conflict is retried as in the timed loop."""
    warmed = 0
    for job_index, job in enumerate(spec["jobs"]):
        while warmed < WARM_PAIRS and _claim(counters, job_index, spec["quota"]):
            try:
                batch = acquire(state, job, worker)
            except Conflicted:
                _unclaim(counters, job_index, spec["quota"])
                continue
            if not batch:
                _unclaim(counters, job_index, spec["quota"])
                break
            succeed(state, batch)
            warmed += 1
        if warmed >= WARM_PAIRS:
            return


class Conflicted(Exception):
    """An acquire lost a race and was retried (the baseline's unique (job, lo) violation)."""


# Tidemark clients


def _tidemark_warm_up(spec):
    from inventory.models import Job
    from inventory.sources.registry import source_for_connector

    jobs = {
        job.pk: job for job in Job.objects.select_related("connector").filter(pk__in=spec["jobs"])
    }
    # the item source built once per client, as a worker builds it once per job before its
    # acquire loop (workers/execution.job_work): its check that the meta table is not one of
    # Tidemark's own (sources/identity.source_table_check) is a statement of its own
    sources = {job_id: source_for_connector(job.connector) for job_id, job in jobs.items()}
    return {"jobs": jobs, "sources": sources}


def _tidemark_acquire(state, job_id, worker):
    from inventory.services.lifecycle import batch_acquire

    return batch_acquire(job=state["jobs"][job_id], worker=worker, source=state["sources"][job_id])


def _tidemark_succeed(state, batch):
    from inventory.services.lifecycle import batch_succeed

    batch_succeed(batch_id=batch.pk, attempt=batch.attempt, result={"rows": batch.item_count})


def tidemark_client(index, spec, barrier, counters, queue):
    client_loop(
        index,
        spec,
        barrier,
        counters,
        queue,
        _tidemark_warm_up,
        _tidemark_acquire,
        _tidemark_succeed,
    )


def _tidemark_acquire_k(state, job_id, worker):
    from inventory.services.lifecycle import batches_acquire

    return batches_acquire(
        job=state["jobs"][job_id], worker=worker, count=K_PER_CALL, source=state["sources"][job_id]
    )


def _tidemark_succeed_k(state, batches):
    from inventory.services.lifecycle import batches_succeed

    outcome = batches_succeed(
        job=state["jobs"][batches[0].job_id],
        commits=[
            {"id": b.pk, "attempt": b.attempt, "result": {"rows": b.item_count}} for b in batches
        ],
    )
    if outcome.refused:
        raise RuntimeError(f"batches not committed: {outcome.refused}")


def tidemark_k_client(index, spec, barrier, counters, queue):
    """Tidemark taking and committing K_PER_CALL batches a call (batches_acquire +
    batches_succeed); its latencies are per call, its batches counted one by one."""
    client_loop(
        index,
        spec,
        barrier,
        counters,
        queue,
        _tidemark_warm_up,
        _tidemark_acquire_k,
        _tidemark_succeed_k,
    )


# Baseline clients: one statement per acquire, one per succeed

BASELINE_ACQUIRE = f"""
WITH start AS (
    SELECT coalesce(max(hi), %(first)s) AS lo FROM {SQL_BATCHES} WHERE job = %(job)s
), items AS (
    SELECT m.uid, m.weight,
           sum(m.weight) OVER (ORDER BY m.uid) AS cum_weight,
           row_number() OVER (ORDER BY m.uid) AS n
    FROM (SELECT uid, weight FROM {META} WHERE uid >= (SELECT lo FROM start)
          ORDER BY uid LIMIT %(max_items)s) AS m
), picked AS (
    SELECT uid, weight FROM items WHERE cum_weight <= %(budget)s OR n = 1
)
INSERT INTO {SQL_BATCHES} (job, lo, hi, item_count, weight, worker)
SELECT %(job)s, start.lo, max(picked.uid) + 1, count(*), sum(picked.weight), %(worker)s
FROM picked, start GROUP BY start.lo
RETURNING id
"""

BASELINE_SUCCEED = (
    f"UPDATE {SQL_BATCHES} SET status = 'succeeded', finished_at = now() "
    "WHERE id = %s AND status = 'running'"
)


def _baseline_warm_up(spec):
    import psycopg2

    conn = psycopg2.connect(**spec["conn"])
    conn.autocommit = True
    return {"conn": conn, "cur": conn.cursor(), "spec": spec}


def _baseline_acquire(state, job, worker):
    import psycopg2.errors

    spec = state["spec"]
    try:
        state["cur"].execute(
            BASELINE_ACQUIRE,
            {
                "job": job,
                "first": spec["first"],
                "budget": spec["budget"],
                "max_items": spec["max_items"],
                "worker": worker,
            },
        )
    except psycopg2.errors.UniqueViolation:
        raise Conflicted from None
    row = state["cur"].fetchone()
    return row[0] if row else None


def _baseline_succeed(state, batch_id):
    state["cur"].execute(BASELINE_SUCCEED, [batch_id])
    if state["cur"].rowcount != 1:
        raise RuntimeError(f"baseline batch {batch_id} was not running")


def baseline_client(index, spec, barrier, counters, queue):
    client_loop(
        index,
        spec,
        barrier,
        counters,
        queue,
        _baseline_warm_up,
        _baseline_acquire,
        _baseline_succeed,
    )


# The write floor: what every write shape keeping Tidemark's guarantees must write per pair, and
# nothing else. Issue 48 let the write shape change (the attempt on the batch row, fewer indexes,
# planning inlined) as long as the watermark moves in the commit's transaction; this arm is that
# shape taken to its end: two prepared statements, plain psycopg2, on Tidemark's own tables. The
# acquire (a PL/pgSQL function of two statements, as one statement's snapshot would be older than
# the job's row lock it waits for) locks the job's row, finds the start after the job's last
# batch, reads the next items as the SQL baseline does and inserts the running batch (the attempt
# kept on its row); the succeed moves the batch to succeeded and the job's watermark (never
# backwards) with its event, in one transaction. Left out, and so not priced: the attempt's history and the hourly rates, the
# job's blocked check, the lease reaper and backfill probes, the restatement and live-output
# checks, the settled-row check of the item read, the publish fence's record, the watermark
# moving only over a gapless prefix of commits.

FLOOR_ACQUIRE = f"""
CREATE OR REPLACE FUNCTION tm_floor_acquire(
    p_job bigint, p_first bigint, p_budget bigint, p_max_items integer, p_worker text,
    p_snapshot jsonb
) RETURNS TABLE(id bigint, attempt smallint) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM inventory_job AS j WHERE j.id = p_job FOR UPDATE;
    -- a statement of its own, so its snapshot is taken once the job's row is held
    RETURN QUERY
    WITH start AS (
        SELECT coalesce(max(upper(b.span)), p_first) AS lo FROM inventory_batch AS b
        WHERE b.job_id = p_job AND b.backfill_id IS NULL
    ), items AS (
        SELECT m.uid, m.weight,
               sum(m.weight) OVER (ORDER BY m.uid) AS cum_weight,
               row_number() OVER (ORDER BY m.uid) AS n
        FROM (SELECT t.uid, t.weight FROM {META} AS t WHERE t.uid >= (SELECT lo FROM start)
              ORDER BY t.uid LIMIT p_max_items) AS m
    ), picked AS (
        SELECT items.uid, items.weight FROM items WHERE cum_weight <= p_budget OR n = 1
    )
    INSERT INTO inventory_batch AS b (
        kind, status, span, item_count, weight, attempt, max_attempts, lease_expires_at, worker,
        created_at, started_at, result, error, skip_reason, config_snapshot, job_id
    )
    SELECT 'incremental', 'running', int8range(start.lo, max(picked.uid) + 1), count(*),
           sum(picked.weight), 1, 3, now() + interval '120 seconds', p_worker, now(), now(),
           '{{}}', '{{}}', '', p_snapshot, p_job
    FROM picked, start GROUP BY start.lo
    RETURNING b.id, b.attempt;
END
$$
"""

FLOOR_SUCCEED = """
PREPARE tm_floor_succeed(bigint, smallint, jsonb) AS
WITH batch AS (
    UPDATE inventory_batch
    SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL, result = $3,
        commit_seq = upper(span)
    WHERE id = $1 AND status = 'running' AND attempt = $2
    RETURNING job_id, span
), moved AS (
    UPDATE inventory_watermark AS w
    SET position = greatest(w.position, upper(batch.span)),
        value = to_jsonb(greatest(w.position, upper(batch.span)) - 1), updated_at = now()
    FROM batch WHERE w.job_id = batch.job_id
    RETURNING w.id, w.position
)
INSERT INTO inventory_watermarkevent (
    old_position, new_position, old_value, new_value, source, actor, reason, is_replay,
    created_at, batch_id, watermark_id
)
SELECT 0, moved.position, NULL, NULL, 'commit', '', '', false, now(), $1, moved.id FROM moved
"""


def _floor_warm_up(spec):
    import json

    import psycopg2

    from inventory.models import Job
    from inventory.services.lifecycle.shared import config_snapshot

    conn = psycopg2.connect(**spec["conn"])
    cur = conn.cursor()
    cur.execute("SELECT pg_advisory_xact_lock(48)")  # the clients define it one at a time
    cur.execute(FLOOR_ACQUIRE)
    conn.commit()
    conn.autocommit = True
    cur.execute(FLOOR_SUCCEED)
    snapshots = {
        job.pk: json.dumps(config_snapshot(job)) for job in Job.objects.filter(pk__in=spec["jobs"])
    }
    return {"cur": cur, "spec": spec, "snapshots": snapshots}


def _floor_acquire(state, job_id, worker):
    import psycopg2.errors

    spec = state["spec"]
    try:
        state["cur"].execute(
            "SELECT id, attempt FROM tm_floor_acquire(%s, %s, %s, %s, %s, %s)",
            [
                job_id,
                spec["first"],
                spec["budget"],
                spec["max_items"],
                worker,
                state["snapshots"][job_id],
            ],
        )
    except psycopg2.errors.ExclusionViolation:
        raise Conflicted from None  # not expected: the function plans under the job's row lock
    return state["cur"].fetchone()


def _floor_succeed(state, batch):
    batch_id, attempt = batch
    state["cur"].execute("EXECUTE tm_floor_succeed(%s, %s, %s)", [batch_id, attempt, '{"rows": 1}'])
    if state["cur"].rowcount != 1:
        raise RuntimeError(f"floor batch {batch_id} was not running")


def floor_client(index, spec, barrier, counters, queue):
    client_loop(
        index,
        spec,
        barrier,
        counters,
        queue,
        _floor_warm_up,
        _floor_acquire,
        _floor_succeed,
    )

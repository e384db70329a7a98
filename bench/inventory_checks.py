"""bench_inventory's checks: overlaps and gaps of each run's ranges in SQL, and the backfill
plan against a Python reference that streams the meta table once."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inventory_setup import META, ROWS  # noqa: E402

# ---- correctness checks, in SQL -----------------------------------------------------------------


def check_ranges(ranges_sql: str, params: list, first: int) -> dict:
    """Overlaps, gaps and item-count mismatches of half-open ranges (job, lo, hi, count, ok).

    Per job, ranges ordered by start: an overlap is a range starting before the previous one's
    end, a gap one starting after it (or a first range not starting at the job's first item).
    The item counts are compared with the meta table's rows inside each job's covered span.
    """
    from django.db import connection

    sql = f"""
        WITH r AS ({ranges_sql}),
        o AS (
            SELECT r.*, lag(hi) OVER (PARTITION BY job ORDER BY lo, hi) AS prev_hi,
                   row_number() OVER (PARTITION BY job ORDER BY lo, hi) AS rn
            FROM r AS r(job, lo, hi, item_count, ok)
        ),
        spans AS (
            SELECT job, min(lo) AS lo, max(hi) AS hi, sum(item_count) AS items FROM o GROUP BY job
        )
        SELECT
            (SELECT count(*) FROM o),
            (SELECT count(*) FROM o WHERE lo < prev_hi),
            (SELECT count(*) FROM o WHERE lo > prev_hi OR (rn = 1 AND lo <> %s)),
            (SELECT count(*) FROM o WHERE NOT ok),
            (SELECT coalesce(sum(items), 0) FROM spans),
            (SELECT coalesce(sum(abs(items - (SELECT count(*) FROM {META} m
                                           WHERE m.uid >= spans.lo AND m.uid < spans.hi))), 0)
             FROM spans)
    """
    with connection.cursor() as cur:
        cur.execute(sql, [*params, first])
        total, overlaps, gaps, not_succeeded, items, mismatch = cur.fetchone()
    return {
        "batches": total,
        "overlaps": overlaps,
        "gaps": gaps,
        "not_succeeded": not_succeeded,
        "items": int(items),
        "item_count_mismatch": int(mismatch),
    }


def check_tidemark(job_ids: list[int], first: int) -> dict:
    from django.db import connection

    check = check_ranges(
        "SELECT job_id, lower(span), upper(span), item_count, status = 'succeeded' "
        "FROM inventory_batch WHERE job_id = ANY(%s)",
        [job_ids],
        first,
    )
    with connection.cursor() as cur:  # every job's watermark sits at the end of its batches
        cur.execute(
            """SELECT count(*) FROM inventory_watermark w
               JOIN (SELECT job_id, max(upper(span)) AS hi FROM inventory_batch
                     WHERE job_id = ANY(%s) GROUP BY job_id) b USING (job_id)
               WHERE w.position <> b.hi""",
            [job_ids],
        )
        check["watermark_behind"] = cur.fetchone()[0]
    return check


# ---- backfill plan ------------------------------------------------------------------------------


def reference_plan(conn_params: dict, first: int, last: int, budget: int, cap: int) -> list:
    """The greedy plan computed in Python from one ordered stream of the table: the check."""
    import psycopg2

    conn = psycopg2.connect(**conn_params)
    try:
        with conn.cursor(name="bench_reference") as cur:
            cur.itersize = 50_000
            cur.execute(
                f"SELECT uid, weight FROM {META} WHERE uid >= %s AND uid <= %s ORDER BY uid",
                [first, last],
            )
            plan, lower, count, weight, prev = [], first, 0, 0, None
            for uid, w in cur:
                if count and (weight + w > budget or count >= cap):
                    plan.append((lower, prev + 1, count, weight))
                    lower, count, weight = prev + 1, 0, 0
                count += 1
                weight += w
                prev = uid
            if count:
                plan.append((lower, last + 1, count, weight))
    finally:
        conn.close()
    return plan


def backfill_run(job, conn_params: dict) -> dict:
    from inventory.services.backfills import backfill_preview

    timings, plan = [], None
    for _ in range(3):
        started = time.perf_counter()
        plan = backfill_preview(job=job, range_start=1, range_end=ROWS)
        timings.append(time.perf_counter() - started)
    from django.db import connection

    # the floor under any exact plan: one ordered pass over the range's rows inside PostgreSQL
    floor = []
    with connection.cursor() as cur:
        for _ in range(2):
            started = time.perf_counter()
            cur.execute(
                f"SELECT count(*), sum(weight) FROM (SELECT uid, weight FROM {META} "
                "WHERE uid >= %s AND uid <= %s ORDER BY uid) AS t",
                [1, ROWS],
            )
            cur.fetchone()
            floor.append(time.perf_counter() - started)
    started = time.perf_counter()
    reference = reference_plan(conn_params, 1, ROWS, job.batch_weight, job.max_items)
    reference_s = time.perf_counter() - started
    got = [(p.lower, p.upper, p.item_count, p.weight) for p in plan]
    first_diff = next(
        (i for i, (a, b) in enumerate(zip(got, reference, strict=False)) if a != b), None
    )
    return {
        "seconds": timings,
        "batches": len(got),
        "max_weight": max(p[3] for p in got),
        "max_items": max(p[2] for p in got),
        "mean_items": ROWS / len(got),
        "over_budget": sum(1 for p in got if p[3] > job.batch_weight and p[2] > 1),
        "exact": got == reference,
        "reference_batches": len(reference),
        "first_difference": None
        if first_diff is None
        else [got[first_diff], reference[first_diff]],
        "contiguous": all(a[1] == b[0] for a, b in zip(got, got[1:], strict=False))
        and got[0][0] == 1
        and got[-1][1] == ROWS + 1,
        "reference_seconds": reference_s,
        "ordered_read_seconds": min(floor),
    }

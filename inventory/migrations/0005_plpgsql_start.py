"""tidemark_incremental_start and tidemark_claim_backfill as PL/pgSQL.

As SQL-language functions called from tidemark_acquire they were planned again on every call
(most of an acquire's server time, per bench/bench_inventory.py); PL/pgSQL keeps their plans.
"""

from django.db import migrations

NEXT_START = r"""
CREATE OR REPLACE FUNCTION tidemark_incremental_start(p_job bigint, OUT lo bigint, OUT hi bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    wm_position bigint;
BEGIN
    SELECT position INTO wm_position FROM inventory_watermark WHERE job_id = p_job;
    -- after the last batch holding its range, or the first hole above the watermark
    WITH held AS (
        SELECT lower(span) AS b_lo, upper(span) AS b_hi FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'skipped')
          AND upper(span) > wm_position
    ), ordered AS (
        SELECT b_lo, b_hi, lag(b_hi, 1, wm_position) OVER (ORDER BY b_lo) AS prev_hi FROM held
    ), hole AS (
        SELECT prev_hi AS h_lo, b_lo AS h_hi FROM ordered WHERE b_lo > prev_hi
        ORDER BY b_lo LIMIT 1
    )
    SELECT coalesce((SELECT h_lo FROM hole), (SELECT max(b_hi) FROM held), wm_position),
           (SELECT h_hi FROM hole)
    INTO lo, hi;
END
$$;
"""

CLAIM_BACKFILL = r"""
CREATE OR REPLACE FUNCTION tidemark_claim_backfill(p_job bigint, p_urgent boolean)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    claimed bigint;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM inventory_backfill WHERE job_id = p_job AND status = 'running'
    ) THEN
        RETURN NULL;
    END IF;
    -- a waiting batch of a running backfill that is below its max_concurrency; urgent backfills
    -- (priority > 0) go before incremental work, the others after it
    SELECT b.id INTO claimed FROM inventory_batch AS b
    JOIN inventory_backfill AS f ON f.id = b.backfill_id
    WHERE f.job_id = p_job AND f.status = 'running'
      AND (f.priority > 0) = p_urgent
      AND ((b.status = 'queued' AND (b.next_attempt_at IS NULL OR b.next_attempt_at <= statement_timestamp()))
           OR (b.status = 'failed' AND b.next_attempt_at <= statement_timestamp()))
      AND (SELECT count(*) FROM inventory_batch AS r
           WHERE r.backfill_id = f.id AND r.status = 'running') < f.max_concurrency
    ORDER BY f.priority DESC, f.id, lower(b.span)
    LIMIT 1
    FOR UPDATE OF b SKIP LOCKED;
    RETURN claimed;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("inventory", "0004_commit_functions")]

    # reversing leaves the PL/pgSQL versions in place: they do the same as 0002's
    operations = [migrations.RunSQL(NEXT_START + CLAIM_BACKFILL, migrations.RunSQL.noop)]

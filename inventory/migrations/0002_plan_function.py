"""Planning functions that run inside PostgreSQL.

tidemark_plan_batches: the greedy, exact planner. It reads item rows (uid, weight) in uid order from
the query it is given (rows with uid >= $1, in uid order, no LIMIT; the function adds the end bound and the limit) and cuts them into
continuous ranges whose weight stays within the budget (always at least one item) and whose count
stays within the cap. One pass, no item leaves the database.

tidemark_acquire: the acquire path of batch_acquire in one call: under the job's row lock it claims
a waiting batch (urgent backfill, due retry, queued) or plans the next incremental range (filling a
hole left by a cancelled batch first) and starts it, then returns the batch row.

The item query text comes from psycopg2's own parameter binding (cursor.mogrify) over validated,
quoted identifiers: filter values are adapted by the driver exactly as in any other query.
"""

from django.db import migrations

PLAN = r"""
CREATE OR REPLACE FUNCTION tidemark_plan_batches(
    items_sql text, first_id bigint, end_id bigint, budget bigint, cap integer, max_batches integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
DECLARE
    uid bigint;
    w bigint;
    cur_lo bigint := first_id;
    cur_last bigint;
    cur_n integer := 0;
    cur_w bigint := 0;
    emitted integer := 0;
    query text := items_sql;
BEGIN
    IF end_id IS NOT NULL THEN
        -- bounded only when asked: a two-sided range estimate can steer PostgreSQL away from
        -- the index when the table has no statistics yet
        query := 'SELECT uid, weight FROM (' || query || ') AS items WHERE uid < $2 ORDER BY uid';
    END IF;
    IF max_batches IS NOT NULL THEN
        -- never read more than the batches need (one row more tells whether the source ended);
        -- the LIMIT also steers PostgreSQL to the index
        query := query || ' LIMIT ' || (cap::bigint * max_batches + 1);
    END IF;
    FOR uid, w IN EXECUTE query USING first_id, end_id LOOP
        IF cur_n > 0 AND (cur_w + w > budget OR cur_n >= cap) THEN
            lower := cur_lo; upper := cur_last + 1; item_count := cur_n; weight := cur_w;
            RETURN NEXT;
            emitted := emitted + 1;
            IF max_batches IS NOT NULL AND emitted >= max_batches THEN
                RETURN;
            END IF;
            cur_lo := cur_last + 1; cur_n := 0; cur_w := 0;
        END IF;
        -- checked once the row joins a batch: a bad row never blocks the batch before it
        IF w IS NULL OR w < 0 THEN
            RAISE EXCEPTION 'item % has weight %; weights must be non-negative', uid, w
                USING ERRCODE = '22023';
        END IF;
        cur_n := cur_n + 1; cur_w := cur_w + w; cur_last := uid;
    END LOOP;
    IF cur_n > 0 THEN
        -- the source is exhausted: the last range closes the requested stretch
        lower := cur_lo; upper := coalesce(end_id, cur_last + 1);
        item_count := cur_n; weight := cur_w;
        RETURN NEXT;
    END IF;
END
$$;
"""

NEXT_START = r"""
CREATE OR REPLACE FUNCTION tidemark_incremental_start(p_job bigint, OUT lo bigint, OUT hi bigint)
LANGUAGE sql STABLE AS $$
    -- after the last batch holding its range, or the first hole above the watermark
    WITH wm AS (
        SELECT position FROM inventory_watermark WHERE job_id = p_job
    ), held AS (
        SELECT lower(span) AS lo, upper(span) AS hi FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'skipped')
          AND upper(span) > (SELECT position FROM wm)
    ), ordered AS (
        SELECT lo, hi, lag(hi, 1, (SELECT position FROM wm)) OVER (ORDER BY lo) AS prev_hi
        FROM held
    ), hole AS (
        SELECT prev_hi AS lo, lo AS hi FROM ordered WHERE lo > prev_hi ORDER BY lo LIMIT 1
    )
    SELECT coalesce((SELECT lo FROM hole), (SELECT max(hi) FROM held), (SELECT position FROM wm)),
           (SELECT hi FROM hole)
$$;
"""

ACQUIRE = r"""
CREATE OR REPLACE FUNCTION tidemark_acquire(
    p_job bigint, p_items_sql text, p_worker text, p_lease_seconds integer, p_snapshot jsonb
) RETURNS SETOF inventory_batch
LANGUAGE plpgsql AS $$
DECLARE
    j inventory_job%ROWTYPE;
    connector_state text;
    claimed bigint;
    start_lo bigint;
    start_hi bigint;
    planned record;
BEGIN
    SELECT * INTO j FROM inventory_job WHERE id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist', p_job USING ERRCODE = 'TM404';
    END IF;
    SELECT state INTO connector_state FROM inventory_connector WHERE id = j.connector_id;
    IF j.paused THEN
        RAISE EXCEPTION 'job % is paused', j.name USING ERRCODE = 'TM409';
    ELSIF connector_state <> 'active' THEN
        RAISE EXCEPTION 'the connector of job % is %', j.name, connector_state
            USING ERRCODE = 'TM409';
    END IF;

    claimed := tidemark_claim_backfill(p_job, true);
    IF claimed IS NULL THEN
        SELECT id INTO claimed FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND ((status = 'queued' AND (next_attempt_at IS NULL OR next_attempt_at <= statement_timestamp()))
               OR (status = 'failed' AND next_attempt_at <= statement_timestamp()))
        ORDER BY lower(span) LIMIT 1
        FOR UPDATE SKIP LOCKED;
    END IF;
    IF claimed IS NULL THEN
        SELECT lo, hi INTO start_lo, start_hi FROM tidemark_incremental_start(p_job);
        SELECT * INTO planned
        FROM tidemark_plan_batches(p_items_sql, start_lo, start_hi, j.batch_weight, j.max_items, 1);
        IF planned.lower IS NOT NULL THEN
            INSERT INTO inventory_batch (
                job_id, kind, status, span, item_count, weight, attempt, max_attempts,
                lease_expires_at, worker, created_at, started_at, result, error, skip_reason,
                config_snapshot
            ) VALUES (
                p_job, 'incremental', 'running', int8range(planned.lower, planned.upper),
                planned.item_count, planned.weight, 1, j.max_attempts,
                statement_timestamp() + make_interval(secs => p_lease_seconds), p_worker, statement_timestamp(), statement_timestamp(),
                '{}', '{}', '', p_snapshot
            ) RETURNING id INTO claimed;
            INSERT INTO inventory_batchattempt (batch_id, number, worker, started_at, outcome, error)
            VALUES (claimed, 1, p_worker, statement_timestamp(), '', '{}');
            RETURN QUERY SELECT * FROM inventory_batch WHERE id = claimed;
            RETURN;
        END IF;
        claimed := tidemark_claim_backfill(p_job, false);
        IF claimed IS NULL THEN
            RETURN;
        END IF;
    END IF;

    UPDATE inventory_batch
    SET status = 'running', attempt = attempt + 1, worker = p_worker,
        lease_expires_at = statement_timestamp() + make_interval(secs => p_lease_seconds), started_at = statement_timestamp(),
        finished_at = NULL, next_attempt_at = NULL
    WHERE id = claimed;
    INSERT INTO inventory_batchattempt (batch_id, number, worker, started_at, outcome, error)
    SELECT id, attempt, worker, started_at, '', '{}' FROM inventory_batch WHERE id = claimed;
    RETURN QUERY SELECT * FROM inventory_batch WHERE id = claimed;
END
$$;
"""

CLAIM_BACKFILL = r"""
CREATE OR REPLACE FUNCTION tidemark_claim_backfill(p_job bigint, p_urgent boolean)
RETURNS bigint LANGUAGE sql AS $$
    -- a waiting batch of a running backfill that is below its max_concurrency; urgent backfills
    -- (priority > 0) go before incremental work, the others after it
    SELECT b.id FROM inventory_batch AS b
    JOIN inventory_backfill AS f ON f.id = b.backfill_id
    WHERE f.job_id = p_job AND f.status = 'running'
      AND (f.priority > 0) = p_urgent
      AND ((b.status = 'queued' AND (b.next_attempt_at IS NULL OR b.next_attempt_at <= statement_timestamp()))
           OR (b.status = 'failed' AND b.next_attempt_at <= statement_timestamp()))
      AND (SELECT count(*) FROM inventory_batch AS r
           WHERE r.backfill_id = f.id AND r.status = 'running') < f.max_concurrency
    ORDER BY f.priority DESC, f.id, lower(b.span)
    LIMIT 1
    FOR UPDATE OF b SKIP LOCKED
$$;
"""

DROP = """
DROP FUNCTION IF EXISTS tidemark_acquire(bigint, text, text, integer, jsonb);
DROP FUNCTION IF EXISTS tidemark_claim_backfill(bigint, boolean);
DROP FUNCTION IF EXISTS tidemark_incremental_start(bigint);
DROP FUNCTION IF EXISTS tidemark_plan_batches(text, bigint, bigint, bigint, integer, integer);
"""


class Migration(migrations.Migration):
    dependencies = [("inventory", "0001_initial")]

    operations = [migrations.RunSQL(PLAN + NEXT_START + CLAIM_BACKFILL + ACQUIRE, DROP)]

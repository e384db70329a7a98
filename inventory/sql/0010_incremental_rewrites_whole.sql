-- An incremental batch rewrites outputs in the sink whole (docs/guarantees.md).
--
-- tidemark_plan_incremental plans the next incremental range like tidemark_plan_batches, then:
-- - for a job with a sink, it stops in front of an open batch of a backfill (queued, running,
--   failed) that covers items of the range, and plans nothing while one covers its first item:
--   the two would publish over each other's items in an order nobody chose;
-- - it extends the range to the end of every committed output still in the sink that the range
--   reaches into (a backfill that went ahead of the incremental run, a replay over batches cut
--   with another budget), so the batch replaces those outputs whole when it publishes. Such a
--   batch may exceed the budget: it is as large as what it rewrites.

CREATE OR REPLACE FUNCTION tidemark_plan_incremental(
    p_job bigint, p_items_sql text, p_lo bigint, p_hi bigint, p_budget bigint, p_cap integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
DECLARE
    planned record;
    up bigint;
    blocked bigint;
    ext bigint;
BEGIN
    SELECT * INTO planned FROM tidemark_plan_batches(p_items_sql, p_lo, p_hi, p_budget, p_cap, 1);
    IF planned.lower IS NULL THEN
        RETURN;
    END IF;
    up := planned.upper;
    -- a job without a sink (processed outside Tidemark, acquire/succeed) has no output here to
    -- keep exactly once: its lanes run independently
    SELECT min(lower(b.span)) INTO blocked FROM inventory_batch AS b
    WHERE b.job_id = p_job AND b.backfill_id IS NOT NULL
      AND (SELECT j.sink FROM inventory_job AS j WHERE j.id = p_job) <> '{}'::jsonb
      AND b.status IN ('queued', 'running', 'failed') AND b.span && int8range(p_lo, up);
    IF blocked IS NOT NULL THEN
        IF blocked <= p_lo THEN
            RETURN;
        END IF;
        SELECT * INTO planned FROM tidemark_plan_batches(p_items_sql, p_lo, blocked, p_budget, p_cap, 1);
        IF planned.lower IS NULL THEN
            RETURN;
        END IF;
        up := planned.upper;
    END IF;
    LOOP
        SELECT max(upper(o.span)) INTO ext FROM inventory_batch AS o
        WHERE o.job_id = p_job AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
          AND o.status IN ('succeeded', 'skipped', 'superseded')
          AND o.span && int8range(p_lo, up) AND upper(o.span) > up;
        EXIT WHEN ext IS NULL OR (p_hi IS NOT NULL AND ext > p_hi);
        EXIT WHEN EXISTS (
            SELECT 1 FROM inventory_batch AS b
            WHERE b.job_id = p_job AND b.backfill_id IS NOT NULL
              AND b.status IN ('queued', 'running', 'failed') AND b.span && int8range(up, ext)
        );
        up := ext;
    END LOOP;
    lower := p_lo;
    upper := up;
    IF up = planned.upper THEN
        item_count := planned.item_count;
        weight := planned.weight;
    ELSE
        EXECUTE 'SELECT count(*)::integer, coalesce(sum(weight), 0)::bigint FROM ('
                || p_items_sql || ') AS items WHERE uid < $2'
            INTO item_count, weight USING p_lo, up;
    END IF;
    RETURN NEXT;
END
$$;

-- tidemark_acquire (0008) planning through tidemark_plan_incremental.
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
        SELECT n.lo, n.hi INTO start_lo, start_hi FROM tidemark_incremental_next(p_job, p_items_sql) AS n;
        SELECT * INTO planned
        FROM tidemark_plan_incremental(p_job, p_items_sql, start_lo, start_hi, j.batch_weight, j.max_items);
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

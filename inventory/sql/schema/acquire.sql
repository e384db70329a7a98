-- Acquire: the one place that decides which batch of a job runs next.
--
-- Lock order (docs/architecture.md, "Lock order"): job -> watermark -> backfill -> batch.

-- A due batch of a running backfill below its max_concurrency. Each backfill's row is locked
-- before its running batches are counted, exactly as the worker start does
-- (lifecycle.batch_lock_for_start): the two paths count under the same lock, so together they
-- cannot exceed max_concurrency. The caller holds the job's row.
CREATE OR REPLACE FUNCTION tidemark_claim_backfill(p_job bigint, p_urgent boolean)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    candidate bigint;
    concurrency integer;
    claimed bigint;
BEGIN
    -- urgent backfills (priority > 0) go before incremental work, the others after it; only a
    -- backfill with a waiting batch is locked, so the hot path locks nothing it does not use
    FOR candidate IN
        SELECT f.id FROM inventory_backfill AS f
        WHERE f.job_id = p_job AND f.status = 'running' AND (f.priority > 0) = p_urgent
          AND EXISTS (
              SELECT 1 FROM inventory_batch AS w
              WHERE w.backfill_id = f.id
                AND tidemark_batch_due(w.status, w.next_attempt_at)
          )
        ORDER BY f.priority DESC, f.id
    LOOP
        SELECT max_concurrency INTO concurrency FROM inventory_backfill
        WHERE id = candidate AND status = 'running'
        FOR UPDATE;
        CONTINUE WHEN NOT FOUND;  -- paused or cancelled meanwhile
        CONTINUE WHEN (
            SELECT count(*) FROM inventory_batch WHERE backfill_id = candidate AND status = 'running'
        ) >= concurrency;
        SELECT b.id INTO claimed FROM inventory_batch AS b
        WHERE b.backfill_id = candidate
          AND tidemark_batch_due(b.status, b.next_attempt_at)
        ORDER BY lower(b.span)
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF claimed IS NOT NULL THEN
            RETURN claimed;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Take the next batch of a job and start it, under the job's row lock, in this order: a due batch
-- of an urgent backfill (priority > 0), a due incremental batch (queued or a retry), a newly
-- planned incremental batch, a due batch of another backfill. Returns the started batch, or
-- nothing when there is no work; TM404/TM409 when the job is missing, paused or not active.
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
          AND tidemark_batch_due(status, next_attempt_at)
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

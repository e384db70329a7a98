-- One lock order for every path: job -> watermark -> backfill -> batch (docs/architecture.md,
-- "Lock order"). A path may skip a level but never takes a lock of an earlier level while it
-- holds one of a later level.

-- Acquire's backfill claim (called by tidemark_acquire, which holds the job's row). Each
-- backfill's row is locked before its running batches are counted, exactly as the worker start
-- does (runs._start_if_ours via batches.batch_lock_for_start): the two paths count under the
-- same lock, so together they cannot exceed max_concurrency.
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
                AND ((w.status = 'queued' AND (w.next_attempt_at IS NULL OR w.next_attempt_at <= statement_timestamp()))
                     OR (w.status = 'failed' AND w.next_attempt_at <= statement_timestamp()))
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
          AND ((b.status = 'queued' AND (b.next_attempt_at IS NULL OR b.next_attempt_at <= statement_timestamp()))
               OR (b.status = 'failed' AND b.next_attempt_at <= statement_timestamp()))
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

-- Commit: watermark, then (for a backfill batch) the backfill, then the batch. Before this the
-- backfill row was taken last, after the batch (tidemark_complete_backfill), the reverse of the
-- worker start and of a backfill's cancel: a redelivered task or a cancel racing a commit could
-- deadlock, and when the commit was the victim the batch stayed running with its output written.
CREATE OR REPLACE FUNCTION tidemark_succeed(
    p_batch bigint, p_attempt integer, p_result jsonb, p_value jsonb
) RETURNS SETOF inventory_batch LANGUAGE plpgsql AS $$
DECLARE
    watermark_id bigint;
    v_backfill bigint;
    done inventory_batch%ROWTYPE;
BEGIN
    SELECT w.id, b.backfill_id INTO watermark_id, v_backfill
    FROM inventory_watermark AS w JOIN inventory_batch AS b ON b.job_id = w.job_id
    WHERE b.id = p_batch
    FOR UPDATE OF w;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'batch % does not exist', p_batch USING ERRCODE = 'TM404';
    END IF;
    IF v_backfill IS NOT NULL THEN
        PERFORM 1 FROM inventory_backfill WHERE id = v_backfill FOR UPDATE;
    END IF;
    UPDATE inventory_batch
    SET status = 'succeeded', result = p_result, watermark_value = p_value,
        finished_at = statement_timestamp(), lease_expires_at = NULL, error = '{}'
    WHERE id = p_batch AND status = 'running' AND attempt = p_attempt
      AND lease_expires_at > clock_timestamp()
    RETURNING * INTO done;
    IF NOT FOUND THEN
        RETURN;  -- fenced out: the caller reports why
    END IF;
    UPDATE inventory_batchattempt
    SET finished_at = done.finished_at, outcome = 'succeeded', error = '{}'
    WHERE batch_id = done.id AND number = done.attempt;
    IF done.backfill_id IS NULL THEN
        PERFORM tidemark_advance(watermark_id, done.id, done.worker, '');
    ELSE
        PERFORM tidemark_complete_backfill(done.backfill_id);
    END IF;
    RETURN NEXT done;
END
$$;

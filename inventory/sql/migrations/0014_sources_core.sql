-- 0014: tidemark_succeed numbers a job's commits in commit order (Batch.commit_seq)

-- Fence and commit one attempt: running, this attempt, a lease still alive by the database's clock
-- after the locks were granted. Returns the committed batch, or nothing when fenced out (the
-- caller says why). Called in autocommit it is a single round trip and a single transaction.
CREATE OR REPLACE FUNCTION tidemark_succeed(
    p_batch bigint, p_attempt integer, p_result jsonb, p_value jsonb
) RETURNS SETOF inventory_batch LANGUAGE plpgsql AS $$
DECLARE
    watermark_id bigint;
    v_backfill bigint;
    v_job bigint;
    done inventory_batch%ROWTYPE;
BEGIN
    SELECT w.id, b.backfill_id, b.job_id INTO watermark_id, v_backfill, v_job
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
        finished_at = statement_timestamp(), lease_expires_at = NULL, error = '{}',
        -- commit order, serialized by the watermark row lock held until this transaction ends:
        -- a downstream job_output reader never sees sequence n+1 before n (invariant 5)
        commit_seq = (
            SELECT coalesce(max(c.commit_seq), 0) + 1 FROM inventory_batch AS c
            WHERE c.job_id = v_job AND c.commit_seq IS NOT NULL
        )
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

-- 0053: several batches in one call. tidemark_acquire_batches starts up to k batches of a job for
-- one worker (tidemark_acquire called again under the job's row lock, which the first call takes),
-- and tidemark_succeed_batches commits several batches of a job, each by tidemark_succeed. Both
-- are one statement and one transaction for the caller: one round trip for k batches.

-- Up to `p_count` batches of the job started for one worker in one call (the REST API's
-- acquire-batches/): tidemark_acquire called again until it finds no work or `p_count` batches
-- have started, all in the caller's one transaction and under the job's row lock, which the first
-- call takes. Each batch is what that call alone would have started, in the same order, so every
-- rule of tidemark_acquire holds for each of them (a backfill's max_concurrency, the incremental
-- lane's `p_limit`, the throttles). In the order they started.
CREATE OR REPLACE FUNCTION tidemark_acquire_batches(
    p_job bigint, p_items_sql text, p_worker text, p_lease_seconds integer, p_snapshot jsonb,
    p_limit integer, p_count integer
) RETURNS SETOF inventory_batch
LANGUAGE plpgsql AS $$
DECLARE
    started inventory_batch%ROWTYPE;
BEGIN
    IF p_count IS NULL OR p_count < 1 THEN
        RAISE EXCEPTION 'count must be at least 1, not %', p_count USING ERRCODE = 'TM400';
    END IF;
    FOR i IN 1 .. p_count LOOP
        SELECT * INTO started
        FROM tidemark_acquire(p_job, p_items_sql, p_worker, p_lease_seconds, p_snapshot, p_limit);
        EXIT WHEN started.id IS NULL;
        RETURN NEXT started;
    END LOOP;
END
$$;

-- Several batches committed in one call (the REST API's succeed-batches/), in the order given:
-- each by tidemark_succeed, as alone, in the caller's one transaction. A batch whose attempt may
-- not commit is left as it is and missing from the rows returned (the caller says why), and the
-- others commit. The caller passes batches of one job: their commits then queue on that job's
-- watermark row, which the first takes, so two such calls never hold each other's locks.
CREATE OR REPLACE FUNCTION tidemark_succeed_batches(
    p_batches bigint[], p_attempts integer[], p_results jsonb[], p_values jsonb[]
) RETURNS SETOF inventory_batch LANGUAGE plpgsql AS $$
DECLARE
    done inventory_batch%ROWTYPE;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_batches, 1), 0) LOOP
        SELECT * INTO done
        FROM tidemark_succeed(p_batches[i], p_attempts[i], p_results[i], p_values[i]);
        IF done.id IS NOT NULL THEN
            RETURN NEXT done;
        END IF;
    END LOOP;
END
$$;

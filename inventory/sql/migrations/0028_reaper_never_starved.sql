-- 0028: the reaper is never starved. Acquire takes over its job's expired leases under the job's
-- row lock it holds (tidemark_reap_expired), and the reaper calls the same function after waiting
-- for the job's row like any acquirer (lifecycle.batches_reap_expired), instead of skipping every
-- batch whose job row an acquirer held (its SKIP LOCKED also covered the joined job row).

-- The running batches of a job whose lease expired by the database's clock (their worker is gone)
-- become failed attempts, exactly as lifecycle._fail fails one: `dead` at max_attempts, else
-- `failed` with a retry after retry_backoff_seconds * 2^(attempt - 1); the attempt row is closed
-- with a LeaseExpired error. Returns their ids. The caller holds the job's row (tidemark_acquire,
-- or the reaper, which waits for it as acquirers do, so it is never starved by them); the batches
-- are taken in id order with SKIP LOCKED: one a live transaction holds is left to the next call.
CREATE OR REPLACE FUNCTION tidemark_reap_expired(p_job bigint)
RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
    b record;
    v_error jsonb;
    v_now timestamptz := clock_timestamp();
BEGIN
    FOR b IN
        SELECT x.id, x.attempt, x.max_attempts, x.worker, x.lease_expires_at,
               j.retry_backoff_seconds
        FROM inventory_batch AS x JOIN inventory_job AS j ON j.id = x.job_id
        WHERE x.job_id = p_job AND x.status = 'running' AND x.lease_expires_at < v_now
        ORDER BY x.id
        FOR UPDATE OF x SKIP LOCKED
    LOOP
        v_error := jsonb_build_object(
            'type', 'LeaseExpired',
            'message', format('worker %s stopped heartbeating; lease expired at %s',
                              coalesce(nullif(b.worker, ''), '?'),
                              to_jsonb(b.lease_expires_at) #>> '{}')
        );
        UPDATE inventory_batch
        SET status = CASE WHEN b.attempt >= b.max_attempts THEN 'dead' ELSE 'failed' END,
            next_attempt_at = CASE WHEN b.attempt >= b.max_attempts THEN NULL
                ELSE v_now + make_interval(secs => b.retry_backoff_seconds * 2 ^ (b.attempt - 1))
            END,
            error = v_error, finished_at = v_now, lease_expires_at = NULL
        WHERE id = b.id;
        UPDATE inventory_batchattempt
        SET finished_at = v_now, outcome = 'failed', error = v_error
        WHERE batch_id = b.id AND number = b.attempt;
        RETURN NEXT b.id;
    END LOOP;
END
$$;

-- Take the next batch of a job and start it, under the job's row lock, in this order: a due batch
-- of an urgent backfill (priority > 0), a due incremental batch (queued or a retry), a newly
-- planned incremental batch, a due batch of another backfill (tidemark_claim_backfill: within its
-- max_concurrency and the shared throttle). With `p_limit` (Celery workers pass the job's
-- max_concurrency) no incremental batch starts while `p_limit` of them run; NULL (API clients)
-- sets no limit. Returns the started batch, or nothing when there is no work; TM404/TM409 when
-- the job is missing, paused or not active. Every worker and API client takes work here.
-- Last, still under the job's row lock, it takes over the job's expired leases
-- (tidemark_reap_expired): however many processes acquire in a loop, a lost worker's batch fails
-- at the next acquire and is retried, without waiting for the reaper. This comes after every other
-- lock (job -> backfill -> throttle -> batch): those batches are rows of the last kind.
CREATE OR REPLACE FUNCTION tidemark_acquire(
    p_job bigint, p_items_sql text, p_worker text, p_lease_seconds integer, p_snapshot jsonb,
    p_limit integer
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
    IF claimed IS NULL AND p_limit IS NOT NULL AND (
        SELECT count(*) FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL AND status = 'running'
    ) >= p_limit THEN
        -- the incremental lane is full: only another backfill's batch may start
        claimed := tidemark_claim_backfill(p_job, false);
        IF claimed IS NULL THEN
            PERFORM tidemark_reap_expired(p_job);
            RETURN;
        END IF;
    END IF;
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
            PERFORM tidemark_reap_expired(p_job);
            RETURN QUERY SELECT * FROM inventory_batch WHERE id = claimed;
            RETURN;
        END IF;
        claimed := tidemark_claim_backfill(p_job, false);
        IF claimed IS NULL THEN
            PERFORM tidemark_reap_expired(p_job);
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
    PERFORM tidemark_reap_expired(p_job);
    RETURN QUERY SELECT * FROM inventory_batch WHERE id = claimed;
END
$$;

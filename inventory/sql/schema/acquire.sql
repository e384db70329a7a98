-- Acquire: the one place that decides which batch of a job runs next.
--
-- Lock order (docs/architecture.md, "Lock order"): job -> watermark -> backfill -> backfill
-- throttle -> freshness throttle -> batch.

-- How long a backfill batch's weight counts against the shared backfill throttle after it started.
CREATE OR REPLACE FUNCTION tidemark_throttle_window() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT interval '1 minute'
$$;

-- The freshness controller's limit on all backfills (inventory_freshnessthrottle, one row, set by
-- services/freshness.py): a person's pinned rate, else the controller's while it is enabled; NULL
-- when it sets none. The rate is weight per throttle window, on top of the BackfillThrottle budgets.
CREATE OR REPLACE FUNCTION tidemark_freshness_rate() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(pinned_rate, CASE WHEN enabled THEN rate END)
    FROM inventory_freshnessthrottle WHERE id = 1
$$;

-- The freshness controller's cap on each backfill's running batches (NULL: none); a pin lifts it.
CREATE OR REPLACE FUNCTION tidemark_freshness_concurrency() RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN enabled AND pinned_rate IS NULL THEN concurrency END
    FROM inventory_freshnessthrottle WHERE id = 1
$$;

-- How many of `p_weights` (batches of connector `p_connector`, in order) the shared backfill
-- throttle admits now: the weight of backfill batches started within the window, global and for
-- the connector, stays within each budget set (BackfillThrottle). A batch heavier than a whole
-- budget still runs when nothing else used that budget in the window, so no backfill waits forever.
CREATE OR REPLACE FUNCTION tidemark_throttle_admits(p_connector bigint, p_weights bigint[])
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    budget_all bigint;
    budget_own bigint;
    used_all bigint;
    used_own bigint;
    admitted integer := 0;
    w bigint;
BEGIN
    SELECT weight_per_minute INTO budget_all FROM inventory_backfillthrottle
    WHERE connector_id IS NULL;
    SELECT weight_per_minute INTO budget_own FROM inventory_backfillthrottle
    WHERE connector_id = p_connector;
    -- the freshness controller's rate is one more global budget (LEAST skips a NULL)
    budget_all := least(budget_all, tidemark_freshness_rate());
    IF budget_all IS NULL AND budget_own IS NULL THEN
        RETURN coalesce(cardinality(p_weights), 0);
    END IF;
    SELECT coalesce(sum(b.weight), 0),
           coalesce(sum(b.weight) FILTER (WHERE j.connector_id = p_connector), 0)
    INTO used_all, used_own
    FROM inventory_batch AS b JOIN inventory_job AS j ON j.id = b.job_id
    WHERE b.backfill_id IS NOT NULL
      AND b.started_at >= statement_timestamp() - tidemark_throttle_window();
    FOREACH w IN ARRAY p_weights LOOP
        EXIT WHEN budget_all IS NOT NULL AND used_all > 0 AND used_all + w > budget_all;
        EXIT WHEN budget_own IS NOT NULL AND used_own > 0 AND used_own + w > budget_own;
        used_all := used_all + w;
        used_own := used_own + w;
        admitted := admitted + 1;
    END LOOP;
    RETURN admitted;
END
$$;

-- The batches of a backfill that may start now, in range order: the backfill is running, its due
-- batches fill the slots its max_concurrency leaves free, and the shared throttle admits them.
-- The one rule for a backfill's pace: acquire claims from it, beat's pacing step nudges by it.
-- To count running batches that cannot change meanwhile, the caller holds the backfill's row.
CREATE OR REPLACE FUNCTION tidemark_backfill_admissible(p_backfill bigint)
RETURNS SETOF bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    f inventory_backfill%ROWTYPE;
    v_connector bigint;
    free integer;
    ids bigint[];
    weights bigint[];
BEGIN
    SELECT * INTO f FROM inventory_backfill WHERE id = p_backfill;
    IF NOT FOUND OR f.status <> 'running' THEN
        RETURN;
    END IF;
    free := least(f.max_concurrency, tidemark_freshness_concurrency()) - (
        SELECT count(*) FROM inventory_batch WHERE backfill_id = p_backfill AND status = 'running'
    );
    IF free <= 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(d.id ORDER BY d.lo), array_agg(d.weight ORDER BY d.lo) INTO ids, weights
    FROM (
        SELECT b.id, b.weight, lower(b.span) AS lo FROM inventory_batch AS b
        WHERE b.backfill_id = p_backfill AND tidemark_batch_due(b.status, b.next_attempt_at)
        ORDER BY lower(b.span)
        LIMIT free
    ) AS d;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    SELECT connector_id INTO v_connector FROM inventory_job WHERE id = f.job_id;
    RETURN QUERY SELECT unnest(ids[1:tidemark_throttle_admits(v_connector, weights)]);
END
$$;

-- A batch that tidemark_backfill_admissible admits, of a running backfill of the job, claimed
-- (locked); NULL when none. Each backfill's row is locked before its running batches are counted,
-- exactly as the worker start does (lifecycle.batch_lock_for_start): the two paths count under the
-- same lock, so together they cannot exceed max_concurrency. The throttle's rows are locked next,
-- so two acquirers cannot both spend the last of a budget. The caller holds the job's row.
CREATE OR REPLACE FUNCTION tidemark_claim_backfill(p_job bigint, p_urgent boolean)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    candidate bigint;
    v_connector bigint;
    claimed bigint;
BEGIN
    SELECT connector_id INTO v_connector FROM inventory_job WHERE id = p_job;
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
        PERFORM 1 FROM inventory_backfill WHERE id = candidate AND status = 'running' FOR UPDATE;
        CONTINUE WHEN NOT FOUND;  -- paused or cancelled meanwhile
        PERFORM 1 FROM inventory_backfillthrottle
        WHERE connector_id IS NULL OR connector_id = v_connector
        ORDER BY id
        FOR UPDATE;
        -- the freshness controller's row, when it limits the rate (its budget is spent here too)
        PERFORM 1 FROM inventory_freshnessthrottle
        WHERE id = 1 AND (pinned_rate IS NOT NULL OR (enabled AND rate IS NOT NULL))
        FOR UPDATE;
        SELECT b.id INTO claimed FROM inventory_batch AS b
        WHERE b.id IN (SELECT tidemark_backfill_admissible(candidate))
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
    -- a variable lower bound: the cached (generic) plan then searches the small index of running
    -- leases (batch_running_lease_idx) rather than walking every batch the job ever had
    v_oldest timestamptz := '-infinity';
BEGIN
    FOR b IN
        SELECT x.id, x.worker, x.lease_expires_at
        FROM inventory_batch AS x
        WHERE x.job_id = p_job AND x.status = 'running'
          AND x.lease_expires_at < v_now AND x.lease_expires_at > v_oldest
        ORDER BY x.id
        FOR UPDATE OF x SKIP LOCKED
    LOOP
        v_error := jsonb_build_object(
            'type', 'LeaseExpired',
            'message', format('worker %s stopped heartbeating; lease expired at %s',
                              coalesce(nullif(b.worker, ''), '?'),
                              to_jsonb(b.lease_expires_at) #>> '{}')
        );
        PERFORM tidemark_batch_transition(ARRAY[b.id], ARRAY['running'], 'failed', p_error => v_error);
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
-- Both searches it makes on every call are index searches whatever the statistics say (migration
-- 0035): the due incremental batch by batch_due_incremental_idx, the expired leases among the
-- running ones only (batch_running_lease_idx, expiry then job, or batch_open_status_idx); neither
-- reads the job's committed batches. The reaper is called only when that probe finds an expired
-- lease (on the hot path no call and no loop, migration 0051).
CREATE OR REPLACE FUNCTION tidemark_acquire(
    p_job bigint, p_items_sql text, p_worker text, p_lease_seconds integer, p_snapshot jsonb,
    p_limit integer
) RETURNS SETOF inventory_batch
LANGUAGE plpgsql AS $$
DECLARE
    j inventory_job%ROWTYPE;
    blocked text;
    has_backfill boolean;
    claimed bigint;
    planned inventory_batch%ROWTYPE;
    started inventory_batch%ROWTYPE;
    lane_full boolean := false;
    has_expired boolean;
    -- as in tidemark_reap_expired: a variable bound keeps the probe below on the running leases
    v_oldest timestamptz := '-infinity';
BEGIN
    SELECT * INTO j FROM inventory_job WHERE id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist', p_job USING ERRCODE = 'TM404';
    END IF;
    blocked := tidemark_job_blocked(p_job);
    IF blocked IS NOT NULL THEN
        RAISE EXCEPTION '%', blocked USING ERRCODE = 'TM409';
    END IF;

    -- most jobs run no backfill: one probe instead of two claims that find nothing; and whether
    -- a running lease of the job expired, so the reaper below is called only when one did (both
    -- probes in one statement, migration 0051)
    SELECT EXISTS (
        SELECT 1 FROM inventory_backfill WHERE job_id = p_job AND status = 'running'
    ), EXISTS (
        SELECT 1 FROM inventory_batch AS x
        WHERE x.job_id = p_job AND x.status = 'running'
          AND x.lease_expires_at < clock_timestamp() AND x.lease_expires_at > v_oldest
    ) INTO has_backfill, has_expired;
    IF has_backfill THEN
        claimed := tidemark_claim_backfill(p_job, true);
    END IF;
    IF claimed IS NULL AND p_limit IS NOT NULL AND (
        SELECT count(*) FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL AND status = 'running'
    ) >= p_limit THEN
        -- the incremental lane is full: only another backfill's batch may start
        IF has_backfill THEN
            claimed := tidemark_claim_backfill(p_job, false);
        END IF;
        lane_full := true;
    END IF;
    IF claimed IS NULL AND NOT lane_full THEN
        SELECT id INTO claimed FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND tidemark_batch_due(status, next_attempt_at)
        ORDER BY lower(span) LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF claimed IS NULL THEN
            SELECT * INTO planned
            FROM tidemark_plan_next(p_job, p_items_sql, p_worker, p_lease_seconds, p_snapshot);
            IF planned.id IS NULL AND has_backfill THEN
                claimed := tidemark_claim_backfill(p_job, false);
            END IF;
        END IF;
    END IF;
    IF claimed IS NOT NULL THEN
        SELECT * INTO started FROM tidemark_batch_transition(
            ARRAY[claimed], ARRAY['queued', 'failed'], 'running', p_worker, p_lease_seconds
        );
    END IF;

    -- last, still under the job's row lock: the job's expired leases, when the probe above
    -- found one (a lease that expires meanwhile is the next acquire's)
    IF has_expired THEN
        PERFORM tidemark_reap_expired(p_job);
    END IF;
    IF planned.id IS NOT NULL THEN
        RETURN NEXT planned;
    ELSIF claimed IS NOT NULL THEN
        RETURN NEXT started;
    END IF;
END
$$;

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

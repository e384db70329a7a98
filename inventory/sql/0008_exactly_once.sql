-- Exactly once across retry, replay and backfill (invariants 5, 7, 8; docs/guarantees.md).
--
-- The publish fence. A sink publishes a batch's output (renames a staged directory into place,
-- merges a staging table) only between tidemark_publish_begin and tidemark_publish_end, called in
-- one transaction of the control-plane database that stays open while the sink publishes:
--   begin  locks the job's watermark row (one publish per job at a time; lock order
--          watermark -> batch), then the batch row, and refuses (TM409) unless the batch is
--          running on this attempt with a live lease: a stale or cancelled attempt never touches
--          the published output. It returns the batches whose output the new one replaces: every
--          other batch of the job whose output is still in the sink and covers some of its items.
--          A committed output must lie wholly inside the new batch's range (planning rewrites
--          batches whole); otherwise the publish is refused (TM422) rather than lose rows.
--   end    records that this attempt's output is in the sink and that the replaced outputs left.
-- While the transaction is open, a cancel, the reaper or a new attempt waits for the batch row.

CREATE OR REPLACE FUNCTION tidemark_publish_begin(p_batch bigint, p_attempt integer)
RETURNS TABLE(batch_id bigint, committed boolean) LANGUAGE plpgsql AS $$
DECLARE
    b inventory_batch%ROWTYPE;
    straddling record;
BEGIN
    PERFORM 1 FROM inventory_watermark AS w JOIN inventory_batch AS x ON x.job_id = w.job_id
    WHERE x.id = p_batch
    FOR UPDATE OF w;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'batch % does not exist', p_batch USING ERRCODE = 'TM404';
    END IF;
    SELECT * INTO b FROM inventory_batch WHERE id = p_batch FOR UPDATE;
    IF b.status <> 'running' OR b.attempt <> p_attempt
       OR b.lease_expires_at IS NULL OR b.lease_expires_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'batch % attempt % may not publish its output: the batch is % on attempt %',
            p_batch, p_attempt, b.status, b.attempt
            USING ERRCODE = 'TM409';
    END IF;
    SELECT o.id, o.span INTO straddling FROM inventory_batch AS o
    WHERE o.job_id = b.job_id AND o.id <> b.id
      AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
      AND o.status IN ('succeeded', 'skipped', 'superseded')
      AND o.span && b.span AND NOT b.span @> o.span
    ORDER BY lower(o.span) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'the committed output of batch % (items %) reaches outside batch % (items %): replacing it would remove rows this batch does not rewrite', straddling.id,
            straddling.span, b.id, b.span
            USING ERRCODE = 'TM422';
    END IF;
    RETURN QUERY
        SELECT o.id, o.status IN ('succeeded', 'skipped', 'superseded') FROM inventory_batch AS o
        WHERE o.job_id = b.job_id AND o.id <> b.id
          AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
          AND o.span && b.span
        ORDER BY lower(o.span);
END
$$;

CREATE OR REPLACE FUNCTION tidemark_publish_end(p_batch bigint, p_attempt integer, p_replaced bigint[])
RETURNS void LANGUAGE sql AS $$
    UPDATE inventory_batch SET published_attempt = p_attempt WHERE id = p_batch;
    UPDATE inventory_batch SET replaced_by_id = p_batch
    WHERE id = ANY(p_replaced) AND id <> p_batch AND replaced_by_id IS NULL;
$$;

-- The planner, now stopping at the visibility horizon: the item query returns (uid, weight,
-- settled). `settled` is false for a row that may have committed before rows with smaller ids
-- that are still in flight (items.ItemSource.planning_query); planning stops in front of it, and
-- the last range then ends right after its last item, never at `end_id`, so an id that is still
-- in flight is never inside a planned range.
CREATE OR REPLACE FUNCTION tidemark_plan_batches(
    items_sql text, first_id bigint, end_id bigint, budget bigint, cap integer, max_batches integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
DECLARE
    uid bigint;
    w bigint;
    settled boolean;
    stopped boolean := false;
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
        query := 'SELECT uid, weight, settled FROM (' || query || ') AS items WHERE uid < $2 ORDER BY uid';
    END IF;
    IF max_batches IS NOT NULL THEN
        query := query || ' LIMIT ' || (cap::bigint * max_batches + 1);
    END IF;
    FOR uid, w, settled IN EXECUTE query USING first_id, end_id LOOP
        IF NOT settled THEN
            stopped := true;
            EXIT;
        END IF;
        IF cur_n > 0 AND (cur_w + w > budget OR cur_n >= cap) THEN
            lower := cur_lo; upper := cur_last + 1; item_count := cur_n; weight := cur_w;
            RETURN NEXT;
            emitted := emitted + 1;
            IF max_batches IS NOT NULL AND emitted >= max_batches THEN
                RETURN;
            END IF;
            cur_lo := cur_last + 1; cur_n := 0; cur_w := 0;
        END IF;
        IF w IS NULL OR w < 0 THEN
            RAISE EXCEPTION 'item % has weight %; weights must be non-negative', uid, w
                USING ERRCODE = '22023';
        END IF;
        cur_n := cur_n + 1; cur_w := cur_w + w; cur_last := uid;
    END LOOP;
    IF cur_n > 0 THEN
        lower := cur_lo;
        upper := CASE WHEN stopped THEN cur_last + 1 ELSE coalesce(end_id, cur_last + 1) END;
        item_count := cur_n; weight := cur_w;
        RETURN NEXT;
    END IF;
END
$$;

-- Where the next incremental batch starts, after covering every hole (a cancelled batch's range)
-- that has no item left with a skipped batch, so an emptied hole never stops the watermark. The
-- caller holds the job's row; the watermark is locked next (lock order job -> watermark).
CREATE OR REPLACE FUNCTION tidemark_incremental_next(
    p_job bigint, p_items_sql text, OUT lo bigint, OUT hi bigint
) LANGUAGE plpgsql AS $$
DECLARE
    has_item boolean;
    wm_id bigint;
    sealed bigint;
BEGIN
    LOOP
        SELECT s.lo, s.hi INTO lo, hi FROM tidemark_incremental_start(p_job) AS s;
        IF hi IS NULL THEN
            RETURN;
        END IF;
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM (' || p_items_sql || ') AS items WHERE uid < $2)'
            INTO has_item USING lo, hi;
        IF has_item THEN
            RETURN;
        END IF;
        SELECT id INTO wm_id FROM inventory_watermark WHERE job_id = p_job FOR UPDATE;
        INSERT INTO inventory_batch (
            job_id, kind, status, span, item_count, weight, attempt, max_attempts, worker,
            created_at, finished_at, result, error, skip_reason, config_snapshot
        ) SELECT p_job, 'incremental', 'skipped', int8range(lo, hi), 0, 0, 0, j.max_attempts, '',
                 statement_timestamp(), statement_timestamp(), '{}', '{}',
                 'no item left in the range of a cancelled batch', '{}'
          FROM inventory_job AS j WHERE j.id = p_job
        RETURNING id INTO sealed;
        PERFORM tidemark_advance(wm_id, sealed, 'tidemark', 'empty hole skipped');
    END LOOP;
END
$$;

-- tidemark_acquire (0002) with the hole step above.
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

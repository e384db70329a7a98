-- 0031: faster acquire + succeed (issue 20). One incremental batch is planned by one prepared
-- statement instead of a per-row PL/pgSQL loop (tidemark_plan_one, tidemark_prepared), and the hot
-- paths skip work that finds nothing (a job with no running backfill, a move check done in the
-- statement). Every guarantee stays: locks and their order, fencing, events, the move table.

CREATE OR REPLACE FUNCTION tidemark_prepared(p_sql text, p_types text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_name text := 'tidemark_' || md5(p_types || ':' || p_sql);
BEGIN
    PERFORM 1 FROM pg_prepared_statements AS s WHERE s.name = v_name;
    IF NOT FOUND THEN
        EXECUTE format('PREPARE %I(%s) AS %s', v_name, p_types, p_sql);
    END IF;
    RETURN v_name;
END
$$;

CREATE OR REPLACE FUNCTION tidemark_plan_one(
    items_sql text, first_id bigint, end_id bigint, budget bigint, cap integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
DECLARE
    rows_sql text := items_sql;
    stop record;
BEGIN
    IF end_id IS NOT NULL THEN
        rows_sql := 'SELECT uid, weight, settled FROM (' || rows_sql
                    || ') AS items WHERE uid < $2 ORDER BY uid';
    END IF;
    EXECUTE format(
        'EXECUTE %I(%L, %L, %L, %L)',
        tidemark_prepared(
            'SELECT uid, weight, settled, n, prev_uid, prev_w, next_uid IS NULL AS last FROM ('
            || 'SELECT uid, weight, settled, row_number() OVER w AS n, lag(uid) OVER w AS prev_uid, '
            || 'lead(uid) OVER w AS next_uid, '
            || 'sum(weight) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_w '
            || 'FROM (SELECT uid::bigint AS uid, weight::bigint AS weight, settled FROM ('
            || rows_sql || ' LIMIT $4 + 1) AS c) AS r WINDOW w AS (ORDER BY uid)) AS s '
            || 'WHERE NOT settled OR weight IS NULL OR weight < 0 '
            || 'OR (n > 1 AND (prev_w + weight > $3 OR n > $4)) OR next_uid IS NULL LIMIT 1',
            'bigint, bigint, bigint, integer'
        ),
        first_id, end_id, budget, cap
    ) INTO stop;
    IF stop.n IS NULL THEN
        RETURN;  -- no item
    END IF;
    IF NOT stop.settled OR coalesce(
        stop.n > 1 AND (stop.prev_w + stop.weight > budget OR stop.n > cap), false
    ) THEN
        IF stop.n > 1 THEN  -- the rows before it: nothing when the first row is unsettled
            lower := first_id; upper := stop.prev_uid + 1;
            item_count := stop.n - 1; weight := stop.prev_w;
            RETURN NEXT;
        END IF;
        RETURN;
    END IF;
    IF stop.weight IS NULL OR stop.weight < 0 THEN
        RAISE EXCEPTION 'item % has weight %; weights must be non-negative', stop.uid, stop.weight
            USING ERRCODE = '22023';
    END IF;
    -- the last row, and every row before it fits: the stretch is exhausted
    lower := first_id; upper := coalesce(end_id, stop.uid + 1);
    item_count := stop.n; weight := coalesce(stop.prev_w, 0) + stop.weight;
    RETURN NEXT;
END
$$;

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
    IF max_batches = 1 THEN
        -- one batch (acquire, a plan step): the same rule as one statement, no per-row loop
        RETURN QUERY SELECT * FROM tidemark_plan_one(items_sql, first_id, end_id, budget, cap);
        RETURN;
    END IF;
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

CREATE OR REPLACE FUNCTION tidemark_top_position() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 9223372036854775807::bigint
$$;

CREATE OR REPLACE FUNCTION tidemark_incremental_start(p_job bigint, OUT lo bigint, OUT hi bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    wm_position bigint;
    top bigint := tidemark_top_position();
BEGIN
    SELECT position INTO wm_position FROM inventory_watermark WHERE job_id = p_job;
    -- after the last batch holding its range, or the first hole above the watermark
    WITH held AS (
        SELECT lower(span) AS b_lo, upper(span) AS b_hi FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND status = ANY(tidemark_holding_statuses())
          AND upper(span) > wm_position AND upper(span) <= top
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

CREATE OR REPLACE FUNCTION tidemark_advance(
    p_watermark bigint, p_trigger bigint, p_actor text, p_reason text
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    wm inventory_watermark%ROWTYPE;
    new_position bigint;
    new_value jsonb;
    committed record;
    top bigint := tidemark_top_position();
BEGIN
    -- the caller holds this row's lock
    SELECT * INTO wm FROM inventory_watermark WHERE id = p_watermark;
    new_value := wm.value;
    FOR committed IN
        WITH held AS (
            SELECT lower(span) AS lo, upper(span) AS hi, status, watermark_value,
                   lag(upper(span), 1, wm.position) OVER (ORDER BY lower(span)) AS prev_hi
            FROM inventory_batch
            WHERE job_id = wm.job_id AND backfill_id IS NULL
              AND status = ANY(tidemark_holding_statuses())
              AND upper(span) > wm.position AND upper(span) <= top  -- the index search
        ), stop AS (
            SELECT coalesce(min(lo), 9223372036854775807) AS lo FROM held
            WHERE NOT (status = ANY(tidemark_committed_statuses())) OR lo > prev_hi
        )
        SELECT held.hi, held.watermark_value FROM held, stop
        WHERE held.lo < stop.lo ORDER BY held.lo
    LOOP
        new_position := committed.hi;
        IF wm.type <> 'int' THEN
            new_value := tidemark_merge_watermark(wm.type, new_value, committed.watermark_value);
        END IF;
    END LOOP;
    IF new_position IS NULL THEN
        RETURN;
    END IF;
    IF wm.type = 'int' THEN
        new_value := to_jsonb(new_position - 1);
    END IF;
    INSERT INTO inventory_watermarkevent (
        watermark_id, old_position, new_position, old_value, new_value, source, batch_id, actor,
        reason, is_replay, created_at
    ) VALUES (
        wm.id, wm.position, new_position, wm.value, new_value, 'batch', p_trigger,
        coalesce(p_actor, ''), coalesce(p_reason, ''), false, statement_timestamp()
    );
    UPDATE inventory_watermark
    SET position = new_position, value = new_value, updated_at = statement_timestamp()
    WHERE id = wm.id;
END
$$;

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
BEGIN
    SELECT * INTO j FROM inventory_job WHERE id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist', p_job USING ERRCODE = 'TM404';
    END IF;
    blocked := tidemark_job_blocked(p_job);
    IF blocked IS NOT NULL THEN
        RAISE EXCEPTION '%', blocked USING ERRCODE = 'TM409';
    END IF;

    -- most jobs run no backfill: one probe instead of two claims that find nothing
    has_backfill := EXISTS (
        SELECT 1 FROM inventory_backfill WHERE job_id = p_job AND status = 'running'
    );
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
        SELECT * INTO planned FROM tidemark_plan_next(p_job, p_items_sql, p_worker, p_lease_seconds, p_snapshot);
        IF planned.id IS NOT NULL THEN
            PERFORM tidemark_reap_expired(p_job);
            RETURN NEXT planned;
            RETURN;
        END IF;
        IF has_backfill THEN
            claimed := tidemark_claim_backfill(p_job, false);
        END IF;
        IF claimed IS NULL THEN
            PERFORM tidemark_reap_expired(p_job);
            RETURN;
        END IF;
    END IF;

    SELECT * INTO started FROM tidemark_batch_transition(
        ARRAY[claimed], ARRAY['queued', 'failed'], 'running', p_worker, p_lease_seconds
    );
    PERFORM tidemark_reap_expired(p_job);
    RETURN NEXT started;
END
$$;

-- The SQL gets a home (issue 11): status lists and the one definition of "due" become functions
-- (tidemark_holding_statuses() and the others, tidemark_batch_due) that every function below
-- uses instead of spelling them out; every function is re-created from inventory/sql/schema/ as
-- it stood at this change. Behaviour is unchanged.
--
-- A frozen copy: later changes go into a new numbered file, never here.

-- Status lists and the one definition of "due", shared by every function below.
--
-- The lists mirror inventory/models.py (HOLDING_STATUSES and the others); tests/test_sql_schema.py
-- checks that they agree. Each is an IMMUTABLE SQL function with a constant body, so PostgreSQL
-- inlines it: `status = ANY(tidemark_holding_statuses())` plans exactly like `status IN (...)`.

-- batches that hold their range: nobody else may plan over it (the exclusion constraint's set)
CREATE OR REPLACE FUNCTION tidemark_holding_statuses() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['queued', 'running', 'succeeded', 'failed', 'dead', 'skipped']
$$;

-- batches the watermark may move over
CREATE OR REPLACE FUNCTION tidemark_committed_statuses() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['succeeded', 'skipped']
$$;

-- batches still to run: an open backfill batch holds the incremental planner back
CREATE OR REPLACE FUNCTION tidemark_open_statuses() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['queued', 'running', 'failed']
$$;

-- committed batches whose published output stays in the sink until a later batch replaces it
CREATE OR REPLACE FUNCTION tidemark_output_statuses() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['succeeded', 'skipped', 'superseded']
$$;

-- a backfill is completed once every one of its batches is in one of these
CREATE OR REPLACE FUNCTION tidemark_backfill_done_statuses() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['succeeded', 'skipped', 'cancelled']
$$;

-- A batch is due (may start now) when it is queued with no backoff pending, or failed with its
-- backoff over. Judged by the database's clock, as every lease and retry time is written with it.
-- A STABLE one-expression SQL function: inlined into the queries that call it, indexes included.
CREATE OR REPLACE FUNCTION tidemark_batch_due(p_status text, p_next_attempt_at timestamptz)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (p_status = 'queued'
            AND (p_next_attempt_at IS NULL OR p_next_attempt_at <= statement_timestamp()))
        OR (p_status = 'failed' AND p_next_attempt_at <= statement_timestamp())
$$;

-- Planning: cutting a job's items into batches, inside the database (docs/architecture.md).
--
-- An item query (items.ItemSource.planning_query) yields (uid, weight, settled) rows in uid order
-- from uid $1 on; its text comes from psycopg2's own parameter binding over validated, quoted
-- identifiers. The functions add the end bound and the limit and read only the rows they cut.

-- The greedy, exact planner: continuous ranges whose weight stays within the budget (always at
-- least one item) and whose count stays within the cap. It stops at the visibility horizon:
-- `settled` is false for a row that may have committed before rows with smaller ids still in
-- flight; the last range then ends right after its last item, never at `end_id`.
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

-- Where the next incremental batch starts: after the last batch holding its range, or at the
-- first hole above the watermark (a cancelled batch's range), with the hole's end as the bound.
CREATE OR REPLACE FUNCTION tidemark_incremental_start(p_job bigint, OUT lo bigint, OUT hi bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    wm_position bigint;
BEGIN
    SELECT position INTO wm_position FROM inventory_watermark WHERE job_id = p_job;
    -- after the last batch holding its range, or the first hole above the watermark
    WITH held AS (
        SELECT lower(span) AS b_lo, upper(span) AS b_hi FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND status = ANY(tidemark_holding_statuses())
          AND upper(span) > wm_position
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

-- tidemark_incremental_start after covering every hole that has no item left with a skipped
-- batch, so an emptied hole never stops the watermark. The caller holds the job's row; the
-- watermark is locked next (lock order job -> watermark).
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

-- The next incremental range, which rewrites outputs in the sink whole (docs/guarantees.md):
-- - for a job with a sink, it stops in front of an open batch of a backfill that covers items of
--   the range, and plans nothing while one covers its first item (the two would publish over each
--   other's items in an order nobody chose);
-- - it extends the range to the end of every committed output still in the sink that the range
--   reaches into, so the batch replaces those outputs whole; such a batch may exceed the budget.
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
      AND b.status = ANY(tidemark_open_statuses()) AND b.span && int8range(p_lo, up);
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
          AND o.status = ANY(tidemark_output_statuses())
          AND o.span && int8range(p_lo, up) AND upper(o.span) > up;
        EXIT WHEN ext IS NULL OR (p_hi IS NOT NULL AND ext > p_hi);
        EXIT WHEN EXISTS (
            SELECT 1 FROM inventory_batch AS b
            WHERE b.job_id = p_job AND b.backfill_id IS NOT NULL
              AND b.status = ANY(tidemark_open_statuses()) AND b.span && int8range(up, ext)
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

-- Commit: a batch becomes succeeded and the watermark advances in one transaction (invariants 1,
-- 3, 4, 8). Lock order: watermark, then the batch's backfill, then the batch.

-- The never-decreasing merge of a watermark value with a batch's report (datetime: the later
-- instant; key_value: per-key maximum, missing keys kept; file_set: union; int: the larger). The
-- only implementation: Python asks it too (watermarks.merge_values).
CREATE OR REPLACE FUNCTION tidemark_merge_watermark(p_type text, p_old jsonb, p_new jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_new IS NULL OR p_new = 'null'::jsonb THEN p_old
        WHEN p_old IS NULL OR p_old = 'null'::jsonb THEN p_new
        WHEN p_type = 'datetime' THEN
            CASE WHEN (p_new #>> '{}')::timestamptz > (p_old #>> '{}')::timestamptz
                 THEN p_new ELSE p_old END
        WHEN p_type = 'key_value' THEN (
            SELECT coalesce(jsonb_object_agg(key, top), '{}'::jsonb)
            FROM (
                SELECT key, max((value #>> '{}')::numeric) AS top
                FROM (SELECT * FROM jsonb_each(p_old) UNION ALL SELECT * FROM jsonb_each(p_new)) AS kv
                GROUP BY key
            ) AS merged
        )
        WHEN p_type = 'file_set' THEN (
            SELECT coalesce(jsonb_agg(name ORDER BY name COLLATE "C"), '[]'::jsonb)
            FROM (
                SELECT jsonb_array_elements_text(p_old) UNION SELECT jsonb_array_elements_text(p_new)
            ) AS files(name)
        )
        ELSE to_jsonb(greatest((p_old #>> '{}')::numeric, (p_new #>> '{}')::numeric))
    END
$$;

-- Move a locked watermark over the gap-free run of committed batches that starts at its position,
-- merging what they reported, and record one WatermarkEvent. PL/pgSQL takes a fresh snapshot per
-- statement, so the advance sees every batch committed before the watermark lock was granted.
CREATE OR REPLACE FUNCTION tidemark_advance(
    p_watermark bigint, p_trigger bigint, p_actor text, p_reason text
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    wm inventory_watermark%ROWTYPE;
    new_position bigint;
    new_value jsonb;
    committed record;
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
              AND upper(span) > wm.position
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

-- Mark a running backfill completed once none of its batches is open. The caller holds its row.
CREATE OR REPLACE FUNCTION tidemark_complete_backfill(p_backfill bigint)
RETURNS void LANGUAGE sql AS $$
    UPDATE inventory_backfill SET status = 'completed', updated_at = statement_timestamp()
    WHERE id = p_backfill AND status = 'running'
      AND NOT EXISTS (
          SELECT 1 FROM inventory_batch
          WHERE backfill_id = p_backfill AND NOT (status = ANY(tidemark_backfill_done_statuses()))
      )
$$;

-- Fence and commit one attempt: running, this attempt, a lease still alive by the database's clock
-- after the locks were granted. Returns the committed batch, or nothing when fenced out (the
-- caller says why). Called in autocommit it is a single round trip and a single transaction.
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

-- The publish fence (invariants 7, 8; docs/guarantees.md). A sink publishes a batch's output
-- (renames a staged directory into place, merges a staging table) only between
-- tidemark_publish_begin and tidemark_publish_end, called in one transaction of the control-plane
-- database that stays open while the sink publishes. While it is open, a cancel, the reaper or a
-- new attempt waits for the batch row.

-- Locks the job's watermark row (one publish per job at a time; lock order watermark -> batch),
-- then the batch row, and refuses (TM409) unless the batch is running on this attempt with a live
-- lease. Returns the batches whose output the new one replaces; a committed output must lie
-- wholly inside the new batch's range, otherwise the publish is refused (TM422).
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
      AND o.status = ANY(tidemark_output_statuses())
      AND o.span && b.span AND NOT b.span @> o.span
    ORDER BY lower(o.span) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'the committed output of batch % (items %) reaches outside batch % (items %): replacing it would remove rows this batch does not rewrite', straddling.id,
            straddling.span, b.id, b.span
            USING ERRCODE = 'TM422';
    END IF;
    RETURN QUERY
        SELECT o.id, o.status = ANY(tidemark_output_statuses()) FROM inventory_batch AS o
        WHERE o.job_id = b.job_id AND o.id <> b.id
          AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
          AND o.span && b.span
        ORDER BY lower(o.span);
END
$$;

-- Records that this attempt's output is in the sink and that the replaced outputs left.
CREATE OR REPLACE FUNCTION tidemark_publish_end(p_batch bigint, p_attempt integer, p_replaced bigint[])
RETURNS void LANGUAGE sql AS $$
    UPDATE inventory_batch SET published_attempt = p_attempt WHERE id = p_batch;
    UPDATE inventory_batch SET replaced_by_id = p_batch
    WHERE id = ANY(p_replaced) AND id <> p_batch AND replaced_by_id IS NULL;
$$;

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


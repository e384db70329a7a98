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
-- - it stops in front of an open batch of a backfill that covers items of the range, and plans
--   nothing while one covers its first item (the two would process and publish the same items at
--   once, in an order nobody chose); the same for every job, with a sink or processed outside
--   Tidemark (acquire/succeed), as a backfill is refused over items an open batch holds;
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
    SELECT min(lower(b.span)) INTO blocked FROM inventory_batch AS b
    WHERE b.job_id = p_job AND b.backfill_id IS NOT NULL
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

-- Stop a planner with the source's own message (a job_output's expired commit): an item query is
-- plain SQL, which has no RAISE. SQLSTATE TM422: the source cannot be read as configured.
CREATE OR REPLACE FUNCTION tidemark_refuse(p_message text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', p_message USING ERRCODE = 'TM422';
END
$$;

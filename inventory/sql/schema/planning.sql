-- Planning: cutting a job's items into batches, inside the database (docs/architecture.md).
--
-- An item query (items.ItemSource.planning_query) yields (uid, weight, settled) rows in uid order
-- from uid $1 on; its text comes from psycopg2's own parameter binding over validated, quoted
-- identifiers. The functions add the end bound and the limit and read only the rows they cut.

-- The name of a prepared statement of this session for `p_sql` with parameter types `p_types`,
-- prepared now when missing. Planning a dynamic item query costs more than running it (a window
-- over an index scan, the source's checks); a prepared statement is planned once per session and
-- replanned by PostgreSQL itself when a table it reads changes. Not transactional: it survives a
-- rollback, and DISCARD ALL (a pooler) only makes the next call prepare it again.
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

-- The first batch of tidemark_plan_batches (max_batches 1) by the same greedy rule, found by one
-- statement instead of a per-row loop: a running sum and count over the item rows in uid order,
-- read lazily (the window stops where the outer query stops), and the first row that ends the
-- batch (the first unsettled row, the first that would exceed the budget or the cap, the first
-- with a bad weight, raised as the loop raises) or else the last row (the stretch is exhausted).
-- The statement is prepared once per session (tidemark_prepared).
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

-- The largest position: the upper bound a search of "batches ending after position P" adds, as
-- a variable, so the plan PL/pgSQL caches for it (a generic plan, which knows neither value) sees
-- a narrow range and searches batch_incremental_upper_idx instead of walking all of the job's
-- batches (a cost that grew with every batch the job ever had).
CREATE OR REPLACE FUNCTION tidemark_top_position() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 9223372036854775807::bigint
$$;

-- Where the next incremental batch starts: after the last batch holding its range, or at the
-- first hole above the watermark (a cancelled batch's range), with the hole's end as the bound.
-- Found by index searches of the job's incremental batches by their end, never by reading every
-- batch past the watermark (those can be many: a batch that stays running holds the watermark
-- while later ones commit). Holding batches of the lane never overlap (the exclusion constraint)
-- and every range below the last one was planned once, so a hole is either at the watermark or
-- inside the range of a batch that left the holding statuses (cancelled, superseded): only those
-- few ranges are walked. After a replay or a reset (many superseded batches past the watermark,
-- being planned again) walking them would cost more than one read of the batches past the
-- watermark, which is then what it does (the statement this function had before migration 0033).
CREATE OR REPLACE FUNCTION tidemark_incremental_start(p_job bigint, OUT lo bigint, OUT hi bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    wm_position bigint;
    top bigint := tidemark_top_position();
    first_held record;
    gone record;
    nxt record;
    x bigint;
    gone_count integer;
BEGIN
    -- the watermark, how many batches past it left the holding statuses (cancelled, superseded:
    -- the only places a hole can be), and the first and the last holding batch past it: index
    -- searches, in one statement (migration 0051)
    SELECT w.position, g.n, f.b_lo, l.b_hi INTO wm_position, gone_count, lo, hi
    FROM inventory_watermark AS w
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM inventory_batch
            WHERE job_id = p_job AND backfill_id IS NULL
              AND NOT (status = ANY(tidemark_holding_statuses()))
              AND upper(span) > w.position AND upper(span) <= top
            LIMIT 33
        ) AS gone
    ) AS g
    LEFT JOIN LATERAL (
        SELECT lower(span) AS b_lo FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND status = ANY(tidemark_holding_statuses())
          AND upper(span) > w.position AND upper(span) <= top
        ORDER BY upper(span) LIMIT 1
    ) AS f ON true
    LEFT JOIN LATERAL (
        SELECT upper(span) AS b_hi FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND status = ANY(tidemark_holding_statuses())
          AND upper(span) > w.position AND upper(span) <= top
        ORDER BY upper(span) DESC LIMIT 1
    ) AS l ON true
    WHERE w.job_id = p_job;
    IF gone_count = 0 THEN
        -- no hole but one at the watermark (every range past it was planned once and none left
        -- the holding statuses): the acquire's common case
        IF lo IS NULL THEN
            lo := wm_position;  -- nothing holds a range past the watermark
            hi := NULL;
        ELSIF lo > wm_position THEN
            hi := lo;  -- a hole at the watermark, up to the first holding batch
            lo := wm_position;
        ELSE
            lo := hi;  -- after the last holding batch
            hi := NULL;
        END IF;
        RETURN;
    END IF;
    lo := NULL;
    hi := NULL;
    IF gone_count > 32 THEN
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
        RETURN;
    END IF;
    SELECT lower(span) AS b_lo INTO first_held FROM inventory_batch
    WHERE job_id = p_job AND backfill_id IS NULL
      AND status = ANY(tidemark_holding_statuses())
      AND upper(span) > wm_position AND upper(span) <= top
    ORDER BY upper(span) LIMIT 1;
    IF NOT FOUND THEN
        lo := wm_position;  -- nothing holds a range past the watermark
        RETURN;
    END IF;
    IF first_held.b_lo > wm_position THEN
        lo := wm_position;  -- a hole at the watermark
        hi := first_held.b_lo;
        RETURN;
    END IF;
    <<gones>>
    FOR gone IN
        SELECT lower(span) AS g_lo, upper(span) AS g_hi FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND NOT (status = ANY(tidemark_holding_statuses()))
          AND upper(span) > wm_position AND upper(span) <= top
        ORDER BY lower(span)
    LOOP
        x := greatest(gone.g_lo, wm_position);
        WHILE x < gone.g_hi LOOP
            SELECT lower(span) AS b_lo, upper(span) AS b_hi INTO nxt FROM inventory_batch
            WHERE job_id = p_job AND backfill_id IS NULL
              AND status = ANY(tidemark_holding_statuses())
              AND upper(span) > x AND upper(span) <= top
            ORDER BY upper(span) LIMIT 1;
            -- nothing holds a range past x: no hole at x or after it, and the walks so far
            -- found none before it
            EXIT gones WHEN NOT FOUND;
            IF nxt.b_lo > x THEN
                -- a hole up to nxt, from the end of the holding batch before it
                SELECT greatest(coalesce(max(upper(span)), wm_position), wm_position) INTO lo
                FROM inventory_batch
                WHERE job_id = p_job AND backfill_id IS NULL
                  AND status = ANY(tidemark_holding_statuses())
                  AND upper(span) <= x AND upper(span) > wm_position;
                hi := nxt.b_lo;
                RETURN;
            END IF;
            x := nxt.b_hi;
        END LOOP;
    END LOOP;
    SELECT upper(span) INTO lo FROM inventory_batch  -- after the last holding batch
    WHERE job_id = p_job AND backfill_id IS NULL
      AND status = ANY(tidemark_holding_statuses())
      AND upper(span) > wm_position AND upper(span) <= top
    ORDER BY upper(span) DESC LIMIT 1;
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
        SELECT id INTO sealed FROM tidemark_batch_insert(
            p_job, NULL, 'skipped', ARRAY[lo], ARRAY[hi], ARRAY[0::bigint], ARRAY[0::bigint],
            '{}', p_skip_reason => 'no item left in the range of a cancelled batch',
            p_finished => true
        );
        PERFORM tidemark_advance(wm_id, sealed, 'tidemark', 'empty hole skipped');
    END LOOP;
END
$$;

-- The starts of job p_job's open backfill batches that overlap `p_range`, found by the exclusion
-- constraint's GiST index on all three of its columns (the job, the lane, the span). Said with
-- `span &&` alone, the search read every job's batches over the same items (the jobs of one
-- connector share its ids) and filtered them by job: a cost of every acquire that grew with the
-- number of jobs reading a connector (migration 0040). Inlined by PostgreSQL where it is called.
CREATE OR REPLACE FUNCTION tidemark_open_backfill_starts(p_job bigint, p_range int8range)
RETURNS TABLE(lo bigint) LANGUAGE sql STABLE AS $$
    SELECT lower(b.span) FROM inventory_batch AS b
    WHERE b.job_id = p_job AND b.backfill_id IS NOT NULL
      AND b.status = ANY(tidemark_open_statuses()) AND b.span && p_range
      -- the index's expressions (models.Batch: batch_no_overlap_per_job_lane); a backfill's
      -- lane is its id, from 1 on (0 is the incremental lane)
      AND int8range(b.job_id, b.job_id, '[]') && int8range(p_job, p_job, '[]')
      AND int8range(coalesce(b.backfill_id, 0), coalesce(b.backfill_id, 0), '[]')
          && int8range(1, NULL)
$$;

-- The next incremental range, which rewrites outputs in the sink whole (docs/guarantees.md):
-- - it stops in front of an open batch of a backfill that covers items of the range, and plans
--   nothing while one covers its first item (the two would process and publish the same items at
--   once, in an order nobody chose); the same for every job, with a sink or processed outside
--   Tidemark (acquire/succeed), as a backfill is refused over items an open batch holds;
-- - it stops in front of an item that restates outputs the job's restatement has not rebuilt yet
--   (tidemark_stale_outputs), and plans nothing while its first item is one: restatements go first;
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
    ext_known boolean;
    assets_of bigint := tidemark_job_assets(p_job);  -- NULL: items read from p_items_sql
BEGIN
    SELECT * INTO planned
    FROM tidemark_plan_items(assets_of, p_items_sql, p_lo, p_hi, p_budget, p_cap, 1);
    IF planned.lower IS NULL THEN
        RETURN;
    END IF;
    up := planned.upper;
    -- an open backfill batch over the range, an item restating outputs not rebuilt yet (it waits
    -- for the job's restatement, publish.sql), and the end of the last live output the range
    -- reaches into: one statement for the three (migration 0051)
    SELECT least(
        (SELECT min(o.lo) FROM tidemark_open_backfill_starts(p_job, int8range(p_lo, up)) AS o),
        (SELECT min(s.item) FROM tidemark_stale_outputs(p_job, int8range(p_lo, up)) AS s)
    ), (
        SELECT max(upper(o.span)) FROM inventory_batch AS o
        WHERE o.job_id = p_job AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
          AND o.status = ANY(tidemark_output_statuses())
          AND o.span && int8range(p_lo, up) AND upper(o.span) > up
    ) INTO blocked, ext;
    ext_known := blocked IS NULL;
    IF blocked IS NOT NULL THEN
        IF blocked <= p_lo THEN
            RETURN;
        END IF;
        SELECT * INTO planned
        FROM tidemark_plan_items(assets_of, p_items_sql, p_lo, blocked, p_budget, p_cap, 1);
        IF planned.lower IS NULL THEN
            RETURN;
        END IF;
        up := planned.upper;
    END IF;
    LOOP
        IF NOT ext_known THEN
            SELECT max(upper(o.span)) INTO ext FROM inventory_batch AS o
            WHERE o.job_id = p_job AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
              AND o.status = ANY(tidemark_output_statuses())
              AND o.span && int8range(p_lo, up) AND upper(o.span) > up;
        END IF;
        ext_known := false;
        EXIT WHEN ext IS NULL OR (p_hi IS NOT NULL AND ext > p_hi);
        EXIT WHEN EXISTS (SELECT 1 FROM tidemark_open_backfill_starts(p_job, int8range(up, ext)));
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

-- Why job `p_job` may take no new work now (paused, or its connector not active), or NULL when it
-- may: the one definition, for acquire (which refuses with it) and for Python
-- (lifecycle.job_blocked_reason, which asks it).
CREATE OR REPLACE FUNCTION tidemark_job_blocked(p_job bigint)
RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    reason text;
BEGIN
    SELECT CASE
        WHEN j.paused THEN format('job %s is paused', j.name)
        WHEN c.state <> 'active' THEN format('connector %s is %s', c.name, c.state)
    END INTO reason
    FROM inventory_job AS j JOIN inventory_connector AS c ON c.id = j.connector_id
    WHERE j.id = p_job;
    RETURN reason;
END
$$;

-- The incremental planner, the only one: the next incremental range of job `p_job` over the items
-- of `p_items_sql` (tidemark_incremental_next, then tidemark_plan_incremental within the job's
-- batch_weight and max_items), inserted as a new batch (tidemark_batch_insert): running as the
-- first attempt of `p_worker` when one is named (acquire), else queued (a scheduled run). Returns
-- it, or nothing when no new item waits. The caller holds the job's row lock.
CREATE OR REPLACE FUNCTION tidemark_plan_next(
    p_job bigint, p_items_sql text, p_worker text, p_lease_seconds integer, p_snapshot jsonb
) RETURNS SETOF inventory_batch LANGUAGE plpgsql AS $$
DECLARE
    j inventory_job%ROWTYPE;
    start_lo bigint;
    start_hi bigint;
    planned record;
BEGIN
    SELECT * INTO j FROM inventory_job WHERE id = p_job;
    SELECT n.lo, n.hi INTO start_lo, start_hi FROM tidemark_incremental_next(p_job, p_items_sql) AS n;
    SELECT * INTO planned
    FROM tidemark_plan_incremental(p_job, p_items_sql, start_lo, start_hi, j.batch_weight, j.max_items);
    IF planned.lower IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM tidemark_batch_insert(
        p_job, NULL, CASE WHEN coalesce(p_worker, '') = '' THEN 'queued' ELSE 'running' END,
        ARRAY[planned.lower], ARRAY[planned.upper], ARRAY[planned.item_count::bigint],
        ARRAY[planned.weight::bigint], p_snapshot, coalesce(p_worker, ''),
        coalesce(p_lease_seconds, j.lease_seconds)
    );
END
$$;

-- 0001_baseline: every SQL object of Tidemark's schema as of migration 0028 (main at caa5ddd),
-- applied by inventory/migrations/0001_baseline.py after the tables its model operations create.
-- Built from inventory/sql/schema/*.sql of that day plus the SQL of the old migrations that is not
-- a function (the JIT setting, the reader role, the publish sequence, the triggers). Frozen: never
-- edited; a later change is the next numbered file here.

-- Tidemark's queries are short index lookups; PostgreSQL's JIT compiled the overview's and
-- /metrics' queries for 100+ ms each to run them in 15. New sessions of this database run without.
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET jit = off', current_database()); END $$;

-- tidemark_reader: the role Tidemark's own connection takes (SET LOCAL ROLE, inside the reading
-- transaction) to read users' local meta tables, so that the database itself refuses what the
-- own-table check missed (DESIGN.md, invariant 10). It cannot log in and holds no privilege on
-- Tidemark's tables; an operator grants it SELECT on each meta table (docs/security.md):
--     GRANT SELECT ON public.events_meta TO tidemark_reader;
-- Roles belong to the server, not the database: created once, reused by every Tidemark database.
-- Needs a superuser or CREATEROLE.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tidemark_reader') THEN
        CREATE ROLE tidemark_reader NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
    END IF;
END
$$;
-- Tidemark's user may switch to it (and only it)
GRANT tidemark_reader TO CURRENT_USER;
-- nothing of Tidemark's, even if granted by hand before
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM tidemark_reader;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM tidemark_reader;

-- a number per publish in publish order (tidemark_publish_token, the Delta sink's txn version)
CREATE SEQUENCE IF NOT EXISTS tidemark_publish_seq;

-- ===== functions of schema/statuses.sql =====

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

-- ===== functions of schema/planning.sql =====

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

-- ===== functions of schema/commit.sql =====

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

-- The value a job's watermark has at each boundary of its committed incremental batches: what they
-- reported, merged in span order from the job's start (the same fold tidemark_advance applies). A
-- correction by position takes its value from here, and a value-only correction finds its
-- position here, so a correction can never set a value its committed batches do not give.
CREATE OR REPLACE FUNCTION tidemark_watermark_boundaries(p_job bigint)
RETURNS TABLE(boundary bigint, value jsonb) LANGUAGE plpgsql STABLE AS $$
DECLARE
    wm_type text;
    folded jsonb := NULL;
    committed record;
BEGIN
    SELECT type INTO wm_type FROM inventory_watermark WHERE job_id = p_job;
    FOR committed IN
        SELECT upper(span) AS hi, watermark_value FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND status = ANY(tidemark_committed_statuses())
        ORDER BY lower(span)
    LOOP
        folded := tidemark_merge_watermark(wm_type, folded, committed.watermark_value);
        boundary := committed.hi;
        value := folded;
        RETURN NEXT;
    END LOOP;
END
$$;

-- ===== functions of schema/publish.sql =====

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

-- A number that grows with every publish, drawn inside the fence after tidemark_publish_begin
-- (so, per job, in publish order): the Delta sink's application-transaction version, which lets
-- the Delta log itself refuse an older publish that arrives late (docs/sinks/delta.md).
CREATE OR REPLACE FUNCTION tidemark_publish_token()
RETURNS bigint LANGUAGE sql AS $$
    SELECT nextval('tidemark_publish_seq');
$$;

-- ===== functions of schema/acquire.sql =====

-- Acquire: the one place that decides which batch of a job runs next.
--
-- Lock order (docs/architecture.md, "Lock order"): job -> watermark -> backfill -> batch.

-- How long a backfill batch's weight counts against the shared backfill throttle after it started.
CREATE OR REPLACE FUNCTION tidemark_throttle_window() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT interval '1 minute'
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
    free := f.max_concurrency - (
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

-- ===== functions of schema/prefix_sums.sql =====

-- Prefix sums of a connector's assets (Asset.cum_count, Asset.cum_weight): the running count and
-- weight of the connector's assets up to and including each one, in id order. A job's lag is then
-- (cum at the connector's last asset) - (cum at the last asset before its watermark): two index
-- lookups on asset_connector_id_idx, whatever the backlog (selectors.jobs_lag_by_id).
--
-- The registering INSERT fills them itself under the connector's row lock (queries.sql:
-- assets_register). These triggers keep them true for every other change: an insert that leaves
-- them NULL (the ORM, the admin, a test's factory), a delete of some of a connector's assets, a
-- weight change (a table slice recounted by a restatement). Each takes the connector's row lock,
-- the lock registration holds, so the sums never race a registration.

-- Recompute the sums of a connector's assets from id p_from on, continuing from the asset before
-- it. The caller holds the connector's row lock. Costs the rows from p_from to the end (only those
-- whose sums change are written): a change near the end, where restatements and registrations
-- happen, is cheap.
CREATE OR REPLACE FUNCTION tidemark_asset_prefix_rebuild(p_connector bigint, p_from bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    base_count bigint;
    base_weight numeric;
BEGIN
    SELECT cum_count, cum_weight INTO base_count, base_weight FROM inventory_asset
    WHERE connector_id = p_connector AND id < p_from ORDER BY id DESC LIMIT 1;
    UPDATE inventory_asset AS a
    SET cum_count = s.cum_count, cum_weight = s.cum_weight
    FROM (
        SELECT id, coalesce(base_count, 0) + count(*) OVER w AS cum_count,
               coalesce(base_weight, 0) + sum(weight) OVER w AS cum_weight
        FROM inventory_asset WHERE connector_id = p_connector AND id >= p_from
        WINDOW w AS (ORDER BY id)
    ) AS s
    WHERE a.id = s.id
      AND (a.cum_count, a.cum_weight) IS DISTINCT FROM (s.cum_count, s.cum_weight);
END
$$;

-- BEFORE INSERT, each row: an insert that did not compute its sums (anything but assets_register)
-- gets them here, under the connector's row lock; an id below the connector's last one (an
-- explicit id) moves the sums of the assets after it.
CREATE OR REPLACE FUNCTION tidemark_asset_prefix_insert()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    before_count bigint;
    before_weight numeric;
BEGIN
    IF NEW.cum_count IS NOT NULL AND NEW.cum_weight IS NOT NULL THEN
        RETURN NEW;
    END IF;
    PERFORM 1 FROM inventory_connector WHERE id = NEW.connector_id FOR UPDATE;
    SELECT cum_count, cum_weight INTO before_count, before_weight FROM inventory_asset
    WHERE connector_id = NEW.connector_id AND id < NEW.id ORDER BY id DESC LIMIT 1;
    NEW.cum_count := coalesce(before_count, 0) + 1;
    NEW.cum_weight := coalesce(before_weight, 0) + NEW.weight;
    UPDATE inventory_asset
    SET cum_count = cum_count + 1, cum_weight = cum_weight + NEW.weight
    WHERE connector_id = NEW.connector_id AND id > NEW.id;
    RETURN NEW;
END
$$;

-- AFTER DELETE, each statement: the assets after the first deleted one of each connector get their
-- sums again (nothing to do when a connector's assets all go: a reset, a deleted connector).
CREATE OR REPLACE FUNCTION tidemark_asset_prefix_delete()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed record;
BEGIN
    FOR changed IN
        SELECT connector_id, min(id) AS first FROM tidemark_gone GROUP BY connector_id ORDER BY 1
    LOOP
        PERFORM 1 FROM inventory_connector WHERE id = changed.connector_id FOR UPDATE;
        PERFORM tidemark_asset_prefix_rebuild(changed.connector_id, changed.first);
    END LOOP;
    RETURN NULL;
END
$$;

-- AFTER UPDATE, each statement: the assets whose weight (or connector) changed, and those after
-- them, get their sums again. The rebuild's own updates (trigger depth > 1) change no weight.
CREATE OR REPLACE FUNCTION tidemark_asset_prefix_update()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed record;
BEGIN
    IF pg_trigger_depth() > 1 THEN
        RETURN NULL;
    END IF;
    FOR changed IN
        SELECT connector_id, min(id) AS first FROM (
            SELECT o.connector_id, o.id FROM tidemark_old AS o JOIN tidemark_new AS n ON n.id = o.id
            WHERE n.weight IS DISTINCT FROM o.weight OR n.connector_id <> o.connector_id
            UNION ALL
            SELECT n.connector_id, n.id FROM tidemark_old AS o JOIN tidemark_new AS n ON n.id = o.id
            WHERE n.connector_id <> o.connector_id
        ) AS moved
        GROUP BY connector_id ORDER BY 1
    LOOP
        PERFORM 1 FROM inventory_connector WHERE id = changed.connector_id FOR UPDATE;
        PERFORM tidemark_asset_prefix_rebuild(changed.connector_id, changed.first);
    END LOOP;
    RETURN NULL;
END
$$;

-- ===== functions of schema/rates.sql =====

-- The last-day rates' rollup (models.JobHourlyRates): attempts finished per job and UTC clock hour,
-- succeeded and failed, with the items and weight of the succeeded ones. Kept by a trigger on the
-- attempt row that finishes, so it is written in the transaction that commits (tidemark_succeed)
-- or fails (lifecycle._fail, the reaper) the attempt, by every path, and the dashboard reads at
-- most 24 rows per job instead of counting the day's batches (selectors_health.jobs_rates).

-- AFTER INSERT or UPDATE of an attempt, each row that finished (outcome set, it was '' before).
-- A job's first count in a new hour also removes its rows older than two days (nothing reads
-- them), so the rollup stays small without a periodic step.
CREATE OR REPLACE FUNCTION tidemark_rates_count()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_job bigint;
    v_items bigint;
    v_weight numeric;
    v_hour timestamptz;
    v_ok integer;
BEGIN
    SELECT job_id, item_count, weight INTO v_job, v_items, v_weight
    FROM inventory_batch WHERE id = NEW.batch_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_hour := date_trunc('hour', NEW.finished_at, 'UTC');
    v_ok := CASE WHEN NEW.outcome = 'succeeded' THEN 1 ELSE 0 END;
    UPDATE inventory_jobhourlyrates
    SET succeeded = succeeded + v_ok, failed = failed + 1 - v_ok,
        items = items + v_ok * v_items, weight = weight + v_ok * v_weight
    WHERE job_id = v_job AND hour = v_hour;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    DELETE FROM inventory_jobhourlyrates
    WHERE job_id = v_job AND hour < v_hour - interval '2 days';
    INSERT INTO inventory_jobhourlyrates (job_id, hour, succeeded, failed, items, weight)
    VALUES (v_job, v_hour, v_ok, 1 - v_ok, v_ok * v_items, v_ok * v_weight)
    ON CONFLICT (job_id, hour) DO UPDATE
    SET succeeded = inventory_jobhourlyrates.succeeded + excluded.succeeded,
        failed = inventory_jobhourlyrates.failed + excluded.failed,
        items = inventory_jobhourlyrates.items + excluded.items,
        weight = inventory_jobhourlyrates.weight + excluded.weight;
    RETURN NULL;
END
$$;

-- ===== triggers: prefix sums of each connector's assets, the hourly rates rollup =====

CREATE TRIGGER tidemark_asset_prefix_insert BEFORE INSERT ON inventory_asset
    FOR EACH ROW EXECUTE FUNCTION tidemark_asset_prefix_insert();
CREATE TRIGGER tidemark_asset_prefix_delete AFTER DELETE ON inventory_asset
    REFERENCING OLD TABLE AS tidemark_gone
    FOR EACH STATEMENT EXECUTE FUNCTION tidemark_asset_prefix_delete();
CREATE TRIGGER tidemark_asset_prefix_update AFTER UPDATE ON inventory_asset
    REFERENCING OLD TABLE AS tidemark_old NEW TABLE AS tidemark_new
    FOR EACH STATEMENT EXECUTE FUNCTION tidemark_asset_prefix_update();

CREATE TRIGGER tidemark_rates_count_insert AFTER INSERT ON inventory_batchattempt
    FOR EACH ROW WHEN (NEW.outcome <> '' AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION tidemark_rates_count();
CREATE TRIGGER tidemark_rates_count_update AFTER UPDATE ON inventory_batchattempt
    FOR EACH ROW WHEN (OLD.outcome = '' AND NEW.outcome <> '' AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION tidemark_rates_count();

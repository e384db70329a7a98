-- 0051: acquire + succeed with fewer statements and calls on their hot path (issue 48):
-- - tidemark_acquire: one exit; the reaper (tidemark_reap_expired) is called only when a probe of
--   the job's running leases finds an expired one (made with the probe for a running backfill),
--   where every acquire called it and its loop;
-- - tidemark_incremental_start: the watermark, the batches gone from the holding statuses past
--   it, the first and the last holding batch in one statement: all it reads in the common case
--   (nothing gone);
-- - tidemark_plan_items: one batch over an item query goes to tidemark_plan_one directly;
-- - tidemark_plan_incremental: an open backfill batch, a stale output and a live output to extend
--   over, looked for in one statement;
-- - tidemark_advance: the watermark event and the move in one statement;
-- - tidemark_batch_transition: a commit moves the batch and closes its attempt in one statement.
-- Behaviour is unchanged.

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

-- The one planner entry: a connector's assets by their prefix sums (p_assets_of, the connector),
-- any other item query (a local meta table, a job_output's commits) by reading its rows.
CREATE OR REPLACE FUNCTION tidemark_plan_items(
    p_assets_of bigint, items_sql text, first_id bigint, end_id bigint, budget bigint,
    cap integer, max_batches integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_assets_of IS NOT NULL THEN
        RETURN QUERY SELECT * FROM tidemark_plan_assets(
            p_assets_of, first_id, end_id, budget, cap, max_batches
        );
    ELSIF max_batches = 1 THEN
        -- one batch (acquire, a plan step): tidemark_plan_batches' own first step, called here
        -- so an acquire's item read goes through one function fewer (migration 0051)
        RETURN QUERY SELECT * FROM tidemark_plan_one(items_sql, first_id, end_id, budget, cap);
    ELSE
        RETURN QUERY SELECT * FROM tidemark_plan_batches(
            items_sql, first_id, end_id, budget, cap, max_batches
        );
    END IF;
END
$$;

-- Move the batches of `p_ids` whose status is one of `p_from` to `p_to`, with what that move
-- writes besides the status; batches in another status are left as they are (a fence: a caller
-- that lost a race moves nothing). Returns the moved batches. Refuses (TM400) a move that is not
-- in tidemark_batch_move. The caller holds the rows' locks, in the lock order.
-- - running: the next attempt of `p_worker`, a lease of `p_lease_seconds`, its attempt row;
-- - succeeded: only attempt `p_attempt` with a live lease by the database's clock; the result,
--   the reported watermark value and the next commit sequence of the job; the attempt closed;
-- - failed: `dead` at max_attempts, else `failed` with a retry after the job's backoff
--   (retry_backoff_seconds * 2^(attempt - 1)); the error `p_error`; the attempt closed;
-- - queued: with `p_more_attempts` a fresh round of attempts (an operator's retry);
-- - cancelled: the lease dropped; with `p_error` the error replaced and the batch finished now;
-- - skipped: the reason `p_skip_reason`; superseded, dead: the status alone.
CREATE OR REPLACE FUNCTION tidemark_batch_transition(
    p_ids bigint[], p_from text[], p_to text, p_worker text DEFAULT NULL,
    p_lease_seconds integer DEFAULT NULL, p_attempt integer DEFAULT NULL,
    p_error jsonb DEFAULT NULL, p_result jsonb DEFAULT NULL, p_value jsonb DEFAULT NULL,
    p_skip_reason text DEFAULT NULL, p_more_attempts integer DEFAULT NULL
) RETURNS SETOF inventory_batch LANGUAGE plpgsql
-- Generic plans: every statement here finds its batches by primary key (`id = ANY(p_ids)`), which
-- a generic plan does by index whatever the ids. Left to choose, PostgreSQL priced the generic
-- plan for ten ids against a custom plan for the one id of a commit and planned the succeed's
-- UPDATE anew at every call (0.29 ms of its 0.53 ms, migration 0040).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    -- each UPDATE moves only a batch whose move is in tidemark_batch_move (one probe of its primary
    -- key, inside the statement: the hot paths send no query of their own for the check); when
    -- nothing moved, tidemark_batch_check_moves says whether the move asked for was refused
    IF p_to = 'running' THEN
        RETURN QUERY
        WITH started AS (
            UPDATE inventory_batch
            SET status = 'running', attempt = attempt + 1, worker = p_worker,
                lease_expires_at = statement_timestamp() + make_interval(secs => p_lease_seconds),
                started_at = statement_timestamp(), finished_at = NULL, next_attempt_at = NULL
            WHERE id = ANY(p_ids) AND status = ANY(p_from)
              AND EXISTS (
                  SELECT 1 FROM tidemark_batch_move AS m
                  WHERE m.from_status = inventory_batch.status AND m.to_status = p_to
              )
            RETURNING *
        ), new_attempt AS (
            INSERT INTO inventory_batchattempt (batch_id, number, worker, started_at, outcome, error)
            SELECT id, attempt, worker, started_at, '', '{}' FROM started
        )
        SELECT * FROM started;
    ELSIF p_to = 'succeeded' THEN
        -- the batch and its attempt in one statement (one statement fewer per commit, 0051)
        RETURN QUERY
        WITH done AS (
            UPDATE inventory_batch AS b
            SET status = 'succeeded', result = p_result, watermark_value = p_value,
                finished_at = statement_timestamp(), lease_expires_at = NULL, error = '{}',
                -- commit order, serialized by the watermark row lock the caller holds until its
                -- transaction ends: a downstream job_output reader never sees sequence n+1
                -- before n (invariant 5)
                commit_seq = (
                    SELECT coalesce(max(c.commit_seq), 0) + 1 FROM inventory_batch AS c
                    WHERE c.job_id = b.job_id AND c.commit_seq IS NOT NULL
                )
            WHERE b.id = ANY(p_ids) AND b.status = ANY(p_from) AND b.attempt = p_attempt
              AND b.lease_expires_at > clock_timestamp()
              AND EXISTS (
                  SELECT 1 FROM tidemark_batch_move AS m
                  WHERE m.from_status = b.status AND m.to_status = p_to
              )
            RETURNING b.*
        ), closed AS (
            UPDATE inventory_batchattempt AS a
            SET finished_at = done.finished_at, outcome = 'succeeded', error = '{}'
            FROM done WHERE a.batch_id = done.id AND a.number = done.attempt
        )
        SELECT * FROM done;
    ELSIF p_to = 'failed' OR p_to = 'dead' THEN
        RETURN QUERY
        WITH failed AS (
            UPDATE inventory_batch AS b
            SET status = CASE WHEN p_to = 'dead' OR b.attempt >= b.max_attempts
                              THEN 'dead' ELSE 'failed' END,
                next_attempt_at = CASE WHEN p_to = 'dead' OR b.attempt >= b.max_attempts THEN NULL
                    ELSE v_now + make_interval(secs => j.retry_backoff_seconds * 2 ^ (b.attempt - 1))
                END,
                error = coalesce(p_error, '{}'), finished_at = v_now, lease_expires_at = NULL
            FROM inventory_job AS j
            WHERE j.id = b.job_id AND b.id = ANY(p_ids) AND b.status = ANY(p_from)
              AND EXISTS (
                  SELECT 1 FROM tidemark_batch_move AS m
                  WHERE m.from_status = b.status AND m.to_status = p_to
              )
              AND EXISTS (
                  SELECT 1 FROM tidemark_batch_move AS m
                  WHERE m.from_status = b.status AND m.to_status = 'dead'
              )
            RETURNING b.*
        ), closed AS (
            UPDATE inventory_batchattempt AS a
            SET finished_at = v_now, outcome = 'failed', error = coalesce(p_error, '{}')
            FROM failed WHERE a.batch_id = failed.id AND a.number = failed.attempt
        )
        SELECT * FROM failed;
    ELSE
        RETURN QUERY
        UPDATE inventory_batch AS b
        SET status = p_to,
            max_attempts = CASE WHEN p_more_attempts IS NULL THEN b.max_attempts
                                ELSE b.attempt + p_more_attempts END,
            next_attempt_at = CASE WHEN p_more_attempts IS NULL THEN b.next_attempt_at END,
            lease_expires_at = CASE WHEN p_to = 'cancelled' THEN NULL ELSE b.lease_expires_at END,
            finished_at = CASE WHEN p_to = 'cancelled' AND p_error IS NOT NULL THEN now()
                               ELSE b.finished_at END,
            error = CASE WHEN p_to = 'cancelled' AND p_error IS NOT NULL THEN p_error
                         ELSE b.error END,
            skip_reason = CASE WHEN p_to = 'skipped' THEN coalesce(p_skip_reason, '')
                               ELSE b.skip_reason END
        WHERE b.id = ANY(p_ids) AND b.status = ANY(p_from)
          AND EXISTS (
              SELECT 1 FROM tidemark_batch_move AS m
              WHERE m.from_status = b.status AND m.to_status = p_to
          )
        RETURNING b.*;
    END IF;
    IF NOT FOUND THEN
        PERFORM tidemark_batch_check_moves(p_from, p_to);
        IF p_to = 'failed' THEN
            PERFORM tidemark_batch_check_moves(p_from, 'dead');
        END IF;
    END IF;
END
$$;

-- Move a locked watermark over the gap-free run of committed batches that starts at its position,
-- merging what they reported, and record one WatermarkEvent. PL/pgSQL takes a fresh snapshot per
-- statement, so the advance sees every batch committed before the watermark lock was granted.
-- It walks from the position one batch at a time (an index search of the job's incremental
-- batches by their end), so a commit reads only the batches it moves over: a batch that stays
-- running while later ones commit (they wait behind it, however many) costs each commit one
-- search, not a read of every waiting batch.
CREATE OR REPLACE FUNCTION tidemark_advance(
    p_watermark bigint, p_trigger bigint, p_actor text, p_reason text
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    wm inventory_watermark%ROWTYPE;
    new_position bigint;
    new_value jsonb;
    pos bigint;
    nxt record;
    top bigint := tidemark_top_position();
BEGIN
    -- the caller holds this row's lock
    SELECT * INTO wm FROM inventory_watermark WHERE id = p_watermark;
    new_value := wm.value;
    pos := wm.position;
    LOOP
        -- the next batch holding a range past `pos` (holding batches of the incremental lane
        -- never overlap: the exclusion constraint), if it starts at `pos` and is committed
        SELECT lower(span) AS lo, upper(span) AS hi, status, watermark_value INTO nxt
        FROM inventory_batch
        WHERE job_id = wm.job_id AND backfill_id IS NULL
          AND status = ANY(tidemark_holding_statuses())
          AND upper(span) > pos AND upper(span) <= top  -- the index search
        ORDER BY upper(span)
        LIMIT 1;
        EXIT WHEN NOT FOUND OR nxt.lo > pos
            OR NOT (nxt.status = ANY(tidemark_committed_statuses()));
        pos := nxt.hi;
        new_position := pos;
        IF wm.type <> 'int' THEN
            new_value := tidemark_merge_watermark(wm.type, new_value, nxt.watermark_value);
        END IF;
    END LOOP;
    IF new_position IS NULL THEN
        RETURN;
    END IF;
    IF wm.type = 'int' THEN
        new_value := to_jsonb(new_position - 1);
    END IF;
    -- the event and the move in one statement (migration 0051)
    WITH event AS (
        INSERT INTO inventory_watermarkevent (
            watermark_id, old_position, new_position, old_value, new_value, source, batch_id,
            actor, reason, is_replay, created_at
        ) VALUES (
            wm.id, wm.position, new_position, wm.value, new_value, 'batch', p_trigger,
            coalesce(p_actor, ''), coalesce(p_reason, ''), false, statement_timestamp()
        )
    )
    UPDATE inventory_watermark
    SET position = new_position, value = new_value, updated_at = statement_timestamp()
    WHERE id = wm.id;
END
$$;

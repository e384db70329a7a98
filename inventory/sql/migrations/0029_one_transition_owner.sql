-- 0029: one owner per status transition, and one planner (issue 18).
-- The allowed moves of a batch's and a backfill's status become tables ('new': a row's birth);
-- every status write goes through tidemark_batch_insert, tidemark_batch_transition and
-- tidemark_backfill_transition (schema/transitions.sql), which refuse a move not in them;
-- incremental planning is tidemark_plan_next alone, "blocked" is tidemark_job_blocked alone.

CREATE TABLE tidemark_batch_move (
    from_status text NOT NULL,
    to_status text NOT NULL,
    PRIMARY KEY (from_status, to_status)
);
INSERT INTO tidemark_batch_move (from_status, to_status) VALUES
    ('new', 'queued'), ('new', 'running'), ('new', 'skipped'),
    ('queued', 'running'), ('queued', 'cancelled'), ('queued', 'superseded'),
    ('running', 'succeeded'), ('running', 'failed'), ('running', 'dead'), ('running', 'cancelled'),
    ('failed', 'queued'), ('failed', 'running'), ('failed', 'cancelled'), ('failed', 'superseded'),
    ('dead', 'queued'), ('dead', 'skipped'), ('dead', 'superseded'),
    ('succeeded', 'superseded'),
    ('skipped', 'superseded');

CREATE TABLE tidemark_backfill_move (
    from_status text NOT NULL,
    to_status text NOT NULL,
    PRIMARY KEY (from_status, to_status)
);
INSERT INTO tidemark_backfill_move (from_status, to_status) VALUES
    ('new', 'running'),
    ('running', 'paused'), ('paused', 'running'),
    ('pending', 'cancelled'), ('running', 'cancelled'), ('paused', 'cancelled'),
    ('running', 'completed');

-- Refuse (TM400) when a move from any of `p_from` to `p_to` is not in tidemark_batch_move.
CREATE OR REPLACE FUNCTION tidemark_batch_check_moves(p_from text[], p_to text)
RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    refused text;
BEGIN
    SELECT f INTO refused FROM unnest(p_from) AS f
    WHERE NOT EXISTS (
        SELECT 1 FROM tidemark_batch_move AS m WHERE m.from_status = f AND m.to_status = p_to
    )
    LIMIT 1;
    IF refused IS NOT NULL OR p_from IS NULL THEN
        RAISE EXCEPTION 'a batch may not move from % to %', coalesce(refused, 'any status'), p_to
            USING ERRCODE = 'TM400';
    END IF;
END
$$;

-- Refuse (TM400) when a move from any of `p_from` to `p_to` is not in tidemark_backfill_move.
CREATE OR REPLACE FUNCTION tidemark_backfill_check_moves(p_from text[], p_to text)
RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    refused text;
BEGIN
    SELECT f INTO refused FROM unnest(p_from) AS f
    WHERE NOT EXISTS (
        SELECT 1 FROM tidemark_backfill_move AS m WHERE m.from_status = f AND m.to_status = p_to
    )
    LIMIT 1;
    IF refused IS NOT NULL OR p_from IS NULL THEN
        RAISE EXCEPTION 'a backfill may not move from % to %', coalesce(refused, 'any status'), p_to
            USING ERRCODE = 'TM400';
    END IF;
END
$$;

-- Batches born with status `p_status` ('queued', 'running' or 'skipped'), one per [lower, upper)
-- of the arrays, of job `p_job` and, with `p_backfill`, of that backfill (kind backfill). A batch
-- born running is the first attempt of `p_worker` with a lease of `p_lease_seconds` (by the
-- database's clock), its attempt row written with it; one born skipped carries `p_skip_reason`
-- and is finished now when `p_finished`. Returns the new batches, in the order given.
CREATE OR REPLACE FUNCTION tidemark_batch_insert(
    p_job bigint, p_backfill bigint, p_status text, p_lowers bigint[], p_uppers bigint[],
    p_counts bigint[], p_weights bigint[], p_snapshot jsonb, p_worker text DEFAULT '',
    p_lease_seconds integer DEFAULT NULL, p_skip_reason text DEFAULT '',
    p_finished boolean DEFAULT false
) RETURNS SETOF inventory_batch LANGUAGE plpgsql AS $$
DECLARE
    v_start boolean := p_status = 'running';
BEGIN
    -- the move is checked inside the statement (one lookup, no statement of its own); when
    -- nothing was inserted, tidemark_batch_check_moves says whether the move was refused
    RETURN QUERY
    WITH created AS (
        INSERT INTO inventory_batch (
            job_id, backfill_id, kind, status, span, item_count, weight, attempt, max_attempts,
            lease_expires_at, worker, created_at, started_at, finished_at, result, error,
            skip_reason, config_snapshot
        )
        SELECT p_job, p_backfill,
               CASE WHEN p_backfill IS NULL THEN 'incremental' ELSE 'backfill' END,
               p_status, int8range(g.lo, g.hi), g.n, g.w, CASE WHEN v_start THEN 1 ELSE 0 END,
               j.max_attempts,
               CASE WHEN v_start
                    THEN statement_timestamp() + make_interval(secs => p_lease_seconds) END,
               coalesce(p_worker, ''), statement_timestamp(),
               CASE WHEN v_start THEN statement_timestamp() END,
               CASE WHEN p_finished THEN statement_timestamp() END,
               '{}', '{}', coalesce(p_skip_reason, ''), coalesce(p_snapshot, '{}')
        FROM unnest(p_lowers, p_uppers, p_counts, p_weights) WITH ORDINALITY AS g(lo, hi, n, w, o)
        JOIN inventory_job AS j ON j.id = p_job
        WHERE EXISTS (
            SELECT 1 FROM tidemark_batch_move AS m
            WHERE m.from_status = 'new' AND m.to_status = p_status
        )
        ORDER BY g.o
        RETURNING *
    ), first_attempt AS (
        INSERT INTO inventory_batchattempt (batch_id, number, worker, started_at, outcome, error)
        SELECT c.id, 1, c.worker, c.started_at, '', '{}' FROM created AS c WHERE v_start
    )
    SELECT * FROM created ORDER BY id;
    IF NOT FOUND THEN
        PERFORM tidemark_batch_check_moves(ARRAY['new'], p_status);
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
) RETURNS SETOF inventory_batch LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    moved inventory_batch%ROWTYPE;
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
        FOR moved IN
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
        LOOP
            UPDATE inventory_batchattempt
            SET finished_at = moved.finished_at, outcome = 'succeeded', error = '{}'
            WHERE batch_id = moved.id AND number = moved.attempt;
            RETURN NEXT moved;
        END LOOP;
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

-- Move backfill `p_backfill` from one of `p_from` to `p_to` (updated now); nothing when it is in
-- another status. Returns it when moved. Refuses (TM400) a move not in tidemark_backfill_move.
CREATE OR REPLACE FUNCTION tidemark_backfill_transition(
    p_backfill bigint, p_from text[], p_to text
) RETURNS SETOF inventory_backfill LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tidemark_backfill_check_moves(p_from, p_to);
    RETURN QUERY
    UPDATE inventory_backfill SET status = p_to, updated_at = statement_timestamp()
    WHERE id = p_backfill AND status = ANY(p_from)
    RETURNING *;
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

-- Mark a running backfill completed once none of its batches is open. The caller holds its row.
CREATE OR REPLACE FUNCTION tidemark_complete_backfill(p_backfill bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM inventory_batch
        WHERE backfill_id = p_backfill AND NOT (status = ANY(tidemark_backfill_done_statuses()))
    ) THEN
        PERFORM tidemark_backfill_transition(p_backfill, ARRAY['running'], 'completed');
    END IF;
END
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
    SELECT * INTO done FROM tidemark_batch_transition(
        ARRAY[p_batch], ARRAY['running'], 'succeeded',
        p_attempt => p_attempt, p_result => p_result, p_value => p_value
    );
    IF done.id IS NULL THEN
        RETURN;  -- fenced out: the caller reports why
    END IF;
    IF done.backfill_id IS NULL THEN
        PERFORM tidemark_advance(watermark_id, done.id, done.worker, '');
    ELSE
        PERFORM tidemark_complete_backfill(done.backfill_id);
    END IF;
    RETURN NEXT done;
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
        SELECT x.id, x.worker, x.lease_expires_at
        FROM inventory_batch AS x
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
CREATE OR REPLACE FUNCTION tidemark_acquire(
    p_job bigint, p_items_sql text, p_worker text, p_lease_seconds integer, p_snapshot jsonb,
    p_limit integer
) RETURNS SETOF inventory_batch
LANGUAGE plpgsql AS $$
DECLARE
    j inventory_job%ROWTYPE;
    blocked text;
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
        SELECT * INTO planned FROM tidemark_plan_next(p_job, p_items_sql, p_worker, p_lease_seconds, p_snapshot);
        IF planned.id IS NOT NULL THEN
            PERFORM tidemark_reap_expired(p_job);
            RETURN NEXT planned;
            RETURN;
        END IF;
        claimed := tidemark_claim_backfill(p_job, false);
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

-- Status transitions: the one owner of every write of a batch's or a backfill's status.
--
-- The allowed moves are rows of two tables, tidemark_batch_move and tidemark_backfill_move,
-- (from_status, to_status), where from_status 'new' is a row's birth; they hold exactly the rows of
-- tidemark_batch_moves() and tidemark_backfill_moves() (moves.sql, the one definition).
-- A status is written only here: tidemark_batch_insert (a batch is born), tidemark_batch_transition
-- (a batch moves), tidemark_backfill_transition (a backfill moves). None performs a move that is
-- not in its table, and a call that moves nothing because of one fails with SQLSTATE TM400. For a
-- batch the check is part of the statement that moves it (a probe of the move table's primary key),
-- so the hot paths (acquire, succeed) send no query of their own for it.
-- tests/sql/test_status_transitions.py fails when a status is written anywhere else.

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

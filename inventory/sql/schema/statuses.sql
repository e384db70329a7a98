-- Status lists and the one definition of "due", shared by every function below.
--
-- The lists mirror inventory/models.py (HOLDING_STATUSES and the others); tests/sql/test_schema_home.py
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

-- batches that can never run, so never publish, again (no move leads from these to running): the
-- publish fence hands their unrecorded outputs to the sink as replaced
CREATE OR REPLACE FUNCTION tidemark_retired_statuses() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['skipped', 'cancelled', 'superseded']
$$;

-- a backfill is completed once every one of its batches is in one of these
CREATE OR REPLACE FUNCTION tidemark_backfill_done_statuses() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['succeeded', 'skipped', 'cancelled']
$$;

-- A batch is due (may start now) when it is queued with no backoff pending, or failed with its
-- backoff over. Judged by the database's clock, as every lease and retry time is written with it.
-- A STABLE one-expression SQL function: inlined into the queries that call it, indexes included.
-- Its first conjunct, the status list, is what a partial index over those two statuses is proved
-- usable by: acquire's search of a job's due incremental batch has one of its own
-- (batch_due_incremental_idx; with (job, status) to choose from, a cached plan made before the
-- table had statistics walked every batch of the job instead), a backfill's goes by
-- (backfill, status).
CREATE OR REPLACE FUNCTION tidemark_batch_due(p_status text, p_next_attempt_at timestamptz)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT p_status = ANY(ARRAY['queued', 'failed'])
       AND (p_next_attempt_at <= statement_timestamp()
            OR (p_status = 'queued' AND p_next_attempt_at IS NULL))
$$;

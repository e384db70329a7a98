-- 0032: "due" as an index search (schema/statuses.sql); the batch table's redundant indexes are
-- dropped by the Django operations of migration 0032_batch_indexes.

CREATE OR REPLACE FUNCTION tidemark_batch_due(p_status text, p_next_attempt_at timestamptz)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT p_status = ANY(ARRAY['queued', 'failed'])
       AND (p_next_attempt_at <= statement_timestamp()
            OR (p_status = 'queued' AND p_next_attempt_at IS NULL))
$$;

-- 0048: an Iceberg snapshot that replaced rows of earlier snapshots records them in
-- `extra.restates`, as a Delta version does; tidemark_stale_outputs read them for `delta`
-- connectors only, so a batch over the replacing snapshot could publish before the job's
-- restatement rebuilt the replaced ones (each row twice in the sink until it did). Any item
-- that records `restates` now waits for them.

CREATE OR REPLACE FUNCTION tidemark_stale_outputs(p_job bigint, p_range int8range)
RETURNS TABLE(item bigint, output bigint) LANGUAGE sql STABLE AS $$
    WITH job AS (
        SELECT j.id, c.id AS connector_id, c.kind, c.config->>'job' AS upstream
        FROM inventory_job AS j JOIN inventory_connector AS c ON c.id = j.connector_id
        WHERE j.id = p_job AND j.restatements = 'automatic'
    ), restating AS (
        SELECT a.id AS item, a.discovered_at AS since, r.restated::bigint AS restated
        FROM job JOIN inventory_asset AS a ON a.connector_id = job.connector_id
        CROSS JOIN LATERAL jsonb_array_elements_text(a.extra -> 'restates') AS r(restated)
        WHERE job.kind <> 'job_output' AND a.id >= lower(p_range) AND a.id < upper(p_range)
          AND a.extra ? 'restates'
        UNION ALL
        SELECT u.commit_seq, u.finished_at, r.commit_seq
        FROM job JOIN inventory_job AS up ON up.name = job.upstream
        JOIN inventory_batch AS u ON u.job_id = up.id
        JOIN inventory_batch AS r ON r.replaced_by_id = u.id
        WHERE job.kind = 'job_output' AND u.commit_seq >= lower(p_range)
          AND u.commit_seq < upper(p_range) AND r.commit_seq IS NOT NULL
    )
    SELECT DISTINCT s.item, o.id
    FROM restating AS s JOIN inventory_batch AS o ON o.job_id = p_job AND o.span @> s.restated
    WHERE o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
      AND o.status = ANY(tidemark_output_statuses())
      AND NOT p_range @> o.span
      AND o.started_at < s.since
    ORDER BY s.item, o.id
$$;

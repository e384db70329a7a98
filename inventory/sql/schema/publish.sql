-- The publish fence (invariants 7, 8; docs/guarantees.md). A sink publishes a batch's output
-- (renames a staged directory into place, merges a staging table) only between
-- tidemark_publish_begin and tidemark_publish_end, called in one transaction of the control-plane
-- database that stays open while the sink publishes. While it is open, a cancel, the reaper or a
-- new attempt waits for the batch row.

-- Locks the job's watermark row (one publish per job at a time; lock order watermark -> batch),
-- then the batch row, and refuses (TM409) unless the batch is running on this attempt with a live
-- lease. Returns the batches whose output the new one replaces; a committed output must lie
-- wholly inside the new batch's range, otherwise the publish is refused (TM422). Besides the
-- recorded outputs, the batches inside the new range that ran, never recorded a publish and can
-- never publish again (cancelled, skipped, superseded): a worker killed after its sink committed
-- and before the fence did left an output nobody recorded, and the new batch rewrites its items,
-- so that output leaves with the others (a sink removes nothing where a batch wrote nothing). A batch one of
-- whose items restates outputs not rebuilt yet (tidemark_stale_outputs) is told to wait (TM425):
-- the fence (workers/spark/fence.py) asks again until the restatement has published.
CREATE OR REPLACE FUNCTION tidemark_publish_begin(p_batch bigint, p_attempt integer)
RETURNS TABLE(batch_id bigint, committed boolean) LANGUAGE plpgsql AS $$
DECLARE
    b inventory_batch%ROWTYPE;
    straddling record;
    stale record;
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
    SELECT s.item, s.output INTO stale FROM tidemark_stale_outputs(b.job_id, b.span) AS s LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'batch % waits to publish: its item % restates items whose output (batch %) the job''s restatement has not rebuilt yet',
            p_batch, stale.item, stale.output
            USING ERRCODE = 'TM425';
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
        SELECT r.id, r.recorded FROM (
            SELECT o.id, o.status = ANY(tidemark_output_statuses()) AS recorded, lower(o.span) AS lo
            FROM inventory_batch AS o
            WHERE o.job_id = b.job_id AND o.id <> b.id
              AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
              AND o.span && b.span
            UNION ALL
            -- the outputs a killed attempt may have left unrecorded (batch_job_lower_idx)
            SELECT o.id, false, lower(o.span) FROM inventory_batch AS o
            WHERE o.job_id = b.job_id AND o.id <> b.id
              AND lower(o.span) >= lower(b.span) AND lower(o.span) < upper(b.span)
              AND b.span @> o.span
              AND o.status = ANY(tidemark_retired_statuses())
              AND o.attempt >= 1 AND o.published_attempt IS NULL AND o.replaced_by_id IS NULL
        ) AS r
        ORDER BY r.lo, r.id;
END
$$;

-- Publishes in inventory order (docs/guarantees.md, "Restatements go first"): the outputs of job
-- `p_job` that an item in `p_range` restates and that were read before that item existed, so
-- they still hold the rows the item brings again. A batch over `p_range` publishes only once none
-- is left (tidemark_publish_begin) and the incremental planner stops in front of such an item:
-- the job's restatement (a backfill, priority 1) rebuilds them first. An item restates
--   - in a connector of a table format (`delta`, `iceberg`): the versions or snapshots whose
--     files it removed (`extra.restates`, asset ids, recorded by discovery in the transaction that
--     registers it);
--   - in a `job_output` connector: the upstream commits whose output its upstream batch replaced.
-- Outputs inside `p_range` are not counted (the batch replaces them itself), nor are those of a
-- job whose restatements an operator applies (`proposed`: its sink keeps the rows until then).
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

-- What a files sink reads, inside the fence, to put its `_staging/` in order before it publishes
-- (workers/spark/sinks.py): for the batches `p_ids` of the job of batch `p_batch`, the attempt whose
-- publish was last recorded, whether that output is the one the sink should show (recorded and not
-- replaced since), the batch's current attempt and whether it is running. A swap whose fence never
-- committed is undone from the first two; an attempt's staging is dropped unless its batch is
-- running on it. Batches of other jobs are left out. The caller holds the job's watermark row
-- (tidemark_publish_begin), so no publish of the job changes them meanwhile.
CREATE OR REPLACE FUNCTION tidemark_publish_outputs(p_batch bigint, p_ids bigint[])
RETURNS TABLE(
    batch_id bigint, published_attempt integer, shown boolean, attempt integer, running boolean
)
LANGUAGE sql STABLE AS $$
    SELECT o.id, o.published_attempt, o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL,
           o.attempt, o.status = 'running'
    FROM inventory_batch AS b JOIN inventory_batch AS o ON o.job_id = b.job_id
    WHERE b.id = p_batch AND o.id = ANY(p_ids)
    ORDER BY o.id
$$;

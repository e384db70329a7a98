-- 0052: the publish fence also replaces the outputs a killed attempt may have left unrecorded.
-- A worker killed after its sink committed and before the fence's transaction did leaves an
-- output the control plane never recorded (published_attempt stays NULL). If that batch is then
-- cancelled, skipped or superseded instead of retried, the batch that processes its items again
-- wrote beside that output, and a reader saw those rows twice. tidemark_publish_begin now also
-- returns the batches wholly inside the publishing batch's range that ran, recorded no publish and
-- can never publish again, so the sink removes what they may have left (nothing, where they
-- wrote nothing). The list of those statuses is tidemark_retired_statuses (statuses.sql).

-- batches that can never run, so never publish, again (no move leads from these to running): the
-- publish fence hands their unrecorded outputs to the sink as replaced
CREATE OR REPLACE FUNCTION tidemark_retired_statuses() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['skipped', 'cancelled', 'superseded']
$$;

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

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

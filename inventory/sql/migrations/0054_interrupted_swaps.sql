-- A files sink undoes, inside the next fence of the job, a swap whose worker died before its
-- fence committed: it asks which of the batches it moved aside are still recorded as shown.

-- What a files sink reads, inside the fence, to undo a swap whose worker died before its fence
-- committed (workers/spark/sinks.py): for the batches `p_ids` of the job of batch `p_batch`, the
-- attempt whose publish was last recorded and whether that output is the one the sink should show
-- (recorded and not replaced since). Batches of other jobs are left out. The caller holds the
-- job's watermark row (tidemark_publish_begin), so no publish of the job changes them meanwhile.
CREATE OR REPLACE FUNCTION tidemark_publish_outputs(p_batch bigint, p_ids bigint[])
RETURNS TABLE(batch_id bigint, published_attempt integer, shown boolean)
LANGUAGE sql STABLE AS $$
    SELECT o.id, o.published_attempt, o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
    FROM inventory_batch AS b JOIN inventory_batch AS o ON o.job_id = b.job_id
    WHERE b.id = p_batch AND o.id = ANY(p_ids)
    ORDER BY o.id
$$;

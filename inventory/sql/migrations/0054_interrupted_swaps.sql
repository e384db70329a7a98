-- A files sink puts its `_staging/` in order inside each publish's fence: it undoes a swap whose
-- worker died before its fence committed, and drops the staging of attempts that can no longer
-- publish; it asks the control plane about those batches.

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

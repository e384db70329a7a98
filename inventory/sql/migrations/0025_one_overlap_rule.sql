-- 0025: one overlap rule between the incremental and backfill lanes for every job (a job
-- without a sink no longer plans incremental batches over an open backfill batch)

-- The next incremental range, which rewrites outputs in the sink whole (docs/guarantees.md):
-- - it stops in front of an open batch of a backfill that covers items of the range, and plans
--   nothing while one covers its first item (the two would process and publish the same items at
--   once, in an order nobody chose); the same for every job, with a sink or processed outside
--   Tidemark (acquire/succeed), as a backfill is refused over items an open batch holds;
-- - it extends the range to the end of every committed output still in the sink that the range
--   reaches into, so the batch replaces those outputs whole; such a batch may exceed the budget.
CREATE OR REPLACE FUNCTION tidemark_plan_incremental(
    p_job bigint, p_items_sql text, p_lo bigint, p_hi bigint, p_budget bigint, p_cap integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
DECLARE
    planned record;
    up bigint;
    blocked bigint;
    ext bigint;
BEGIN
    SELECT * INTO planned FROM tidemark_plan_batches(p_items_sql, p_lo, p_hi, p_budget, p_cap, 1);
    IF planned.lower IS NULL THEN
        RETURN;
    END IF;
    up := planned.upper;
    SELECT min(lower(b.span)) INTO blocked FROM inventory_batch AS b
    WHERE b.job_id = p_job AND b.backfill_id IS NOT NULL
      AND b.status = ANY(tidemark_open_statuses()) AND b.span && int8range(p_lo, up);
    IF blocked IS NOT NULL THEN
        IF blocked <= p_lo THEN
            RETURN;
        END IF;
        SELECT * INTO planned FROM tidemark_plan_batches(p_items_sql, p_lo, blocked, p_budget, p_cap, 1);
        IF planned.lower IS NULL THEN
            RETURN;
        END IF;
        up := planned.upper;
    END IF;
    LOOP
        SELECT max(upper(o.span)) INTO ext FROM inventory_batch AS o
        WHERE o.job_id = p_job AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
          AND o.status = ANY(tidemark_output_statuses())
          AND o.span && int8range(p_lo, up) AND upper(o.span) > up;
        EXIT WHEN ext IS NULL OR (p_hi IS NOT NULL AND ext > p_hi);
        EXIT WHEN EXISTS (
            SELECT 1 FROM inventory_batch AS b
            WHERE b.job_id = p_job AND b.backfill_id IS NOT NULL
              AND b.status = ANY(tidemark_open_statuses()) AND b.span && int8range(up, ext)
        );
        up := ext;
    END LOOP;
    lower := p_lo;
    upper := up;
    IF up = planned.upper THEN
        item_count := planned.item_count;
        weight := planned.weight;
    ELSE
        EXECUTE 'SELECT count(*)::integer, coalesce(sum(weight), 0)::bigint FROM ('
                || p_items_sql || ') AS items WHERE uid < $2'
            INTO item_count, weight USING p_lo, up;
    END IF;
    RETURN NEXT;
END
$$;

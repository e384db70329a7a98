-- 0024: tidemark_watermark_boundaries, the value a watermark has at each committed batch boundary
-- (corrections compute a value from a position, or find the position of a value, here)

CREATE OR REPLACE FUNCTION tidemark_watermark_boundaries(p_job bigint)
RETURNS TABLE(boundary bigint, value jsonb) LANGUAGE plpgsql STABLE AS $$
DECLARE
    wm_type text;
    folded jsonb := NULL;
    committed record;
BEGIN
    SELECT type INTO wm_type FROM inventory_watermark WHERE job_id = p_job;
    FOR committed IN
        SELECT upper(span) AS hi, watermark_value FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND status = ANY(tidemark_committed_statuses())
        ORDER BY lower(span)
    LOOP
        folded := tidemark_merge_watermark(wm_type, folded, committed.watermark_value);
        boundary := committed.hi;
        value := folded;
        RETURN NEXT;
    END LOOP;
END
$$;

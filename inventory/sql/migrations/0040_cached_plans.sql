-- Two statements of the acquire + succeed path were planned at every call (pg_stat_statements with
-- track = all and track_planning on, one client: `plans` equal to `calls`):
-- - tidemark_job_assets, a SQL function with a FROM (never inlined, so planned per call): now
--   PL/pgSQL, whose plan the session caches;
-- - the UPDATE of tidemark_batch_transition's succeed branch: the custom plan for one id always
--   looked cheaper than the generic plan priced for ten, so PostgreSQL never kept the generic one.
--   Every statement of the function finds its batches by primary key: generic plans, forced.
-- And one searched too much: the incremental planner's "open backfill batches of this job over the
-- range" used the exclusion constraint's GiST index by the span alone, reading every job's batches
-- over the same items; tidemark_open_backfill_starts gives the index all three of its columns.

CREATE OR REPLACE FUNCTION tidemark_job_assets(p_job bigint)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        SELECT c.id FROM inventory_job AS j JOIN inventory_connector AS c ON c.id = j.connector_id
        WHERE j.id = p_job AND NOT tidemark_lag_outside(c.kind, c.config)
    );
END
$$;

ALTER FUNCTION tidemark_batch_transition(
    bigint[], text[], text, text, integer, integer, jsonb, jsonb, jsonb, text, integer
) SET plan_cache_mode = force_generic_plan;

CREATE OR REPLACE FUNCTION tidemark_open_backfill_starts(p_job bigint, p_range int8range)
RETURNS TABLE(lo bigint) LANGUAGE sql STABLE AS $$
    SELECT lower(b.span) FROM inventory_batch AS b
    WHERE b.job_id = p_job AND b.backfill_id IS NOT NULL
      AND b.status = ANY(tidemark_open_statuses()) AND b.span && p_range
      -- the index's expressions (models.Batch: batch_no_overlap_per_job_lane); a backfill's
      -- lane is its id, from 1 on (0 is the incremental lane)
      AND int8range(b.job_id, b.job_id, '[]') && int8range(p_job, p_job, '[]')
      AND int8range(coalesce(b.backfill_id, 0), coalesce(b.backfill_id, 0), '[]')
          && int8range(1, NULL)
$$;

CREATE OR REPLACE FUNCTION tidemark_plan_incremental(
    p_job bigint, p_items_sql text, p_lo bigint, p_hi bigint, p_budget bigint, p_cap integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
DECLARE
    planned record;
    up bigint;
    blocked bigint;
    ext bigint;
    assets_of bigint := tidemark_job_assets(p_job);  -- NULL: items read from p_items_sql
BEGIN
    SELECT * INTO planned
    FROM tidemark_plan_items(assets_of, p_items_sql, p_lo, p_hi, p_budget, p_cap, 1);
    IF planned.lower IS NULL THEN
        RETURN;
    END IF;
    up := planned.upper;
    SELECT min(o.lo) INTO blocked FROM tidemark_open_backfill_starts(p_job, int8range(p_lo, up)) AS o;
    IF blocked IS NOT NULL THEN
        IF blocked <= p_lo THEN
            RETURN;
        END IF;
        SELECT * INTO planned
        FROM tidemark_plan_items(assets_of, p_items_sql, p_lo, blocked, p_budget, p_cap, 1);
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
        EXIT WHEN EXISTS (SELECT 1 FROM tidemark_open_backfill_starts(p_job, int8range(up, ext)));
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

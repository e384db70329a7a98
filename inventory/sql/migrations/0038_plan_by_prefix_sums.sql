-- Planning a connector's assets by their prefix sums (schema/prefix_sums.sql): a batch's end
-- under the weight budget and the item cap found by index searches, not by reading its items.
-- Incremental planning (tidemark_plan_incremental) and Python's plan_batches go through
-- tidemark_plan_items; the indexes it searches are the migration's AddIndex operations.

-- The next batch of connector p_connector's assets from id p_lo on (and below p_hi, when given)
-- by the greedy rule of tidemark_plan_batches, found by index searches on the prefix sums instead
-- of a read of the batch's items: the connector's sums before p_lo (asset_connector_id_idx), its
-- first asset from p_lo, its last below p_hi, the last whose running weight stays within the
-- budget (asset_connector_cum_weight_idx), the last within the item cap
-- (asset_connector_cum_count_idx), and the row that ends the batch by its id: six probes,
-- whatever the batch's size or the backlog. A batch holds at least one asset even when that one
-- alone is over the budget. `exhausted`: the batch reaches the last asset below p_hi, so its
-- range ends at p_hi (or after that asset, when p_hi is NULL). One statement, so one snapshot:
-- sums a concurrent restatement rewrites are read all old or all new. No row: no asset there.
CREATE OR REPLACE FUNCTION tidemark_asset_batch(
    p_connector bigint, p_lo bigint, p_hi bigint, p_budget bigint, p_cap integer
) RETURNS TABLE(upper bigint, item_count integer, weight bigint, exhausted boolean)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN stop.id = last_in.id THEN coalesce(p_hi, stop.id + 1) ELSE stop.id + 1 END,
           (stop.cum_count - base.n)::integer,
           (stop.cum_weight - base.w)::bigint,
           stop.id = last_in.id
    FROM (
        SELECT coalesce(b.cum_count, 0) AS n, coalesce(b.cum_weight, 0) AS w
        FROM (SELECT 1) AS one LEFT JOIN tidemark_asset_before(p_connector, p_lo) AS b ON true
    ) AS base
    CROSS JOIN LATERAL (
        SELECT a.connector_id, a.id FROM inventory_asset AS a
        WHERE (a.connector_id, a.id) >= (p_connector, p_lo)
        ORDER BY a.connector_id, a.id
        LIMIT 1
    ) AS first_in
    CROSS JOIN LATERAL tidemark_asset_before(p_connector, p_hi) AS last_in
    LEFT JOIN LATERAL (
        SELECT a.connector_id, a.id FROM inventory_asset AS a
        WHERE (a.connector_id, a.cum_weight, a.id)
              <= (p_connector, base.w + p_budget, 9223372036854775807)
        ORDER BY a.connector_id DESC, a.cum_weight DESC, a.id DESC
        LIMIT 1
    ) AS by_weight ON by_weight.connector_id = p_connector
    LEFT JOIN LATERAL (
        SELECT a.connector_id, a.id FROM inventory_asset AS a
        WHERE (a.connector_id, a.cum_count) <= (p_connector, base.n + p_cap)
        ORDER BY a.connector_id DESC, a.cum_count DESC
        LIMIT 1
    ) AS by_count ON by_count.connector_id = p_connector
    CROSS JOIN LATERAL (
        -- LIMIT 1: a lookup of the primary key by the id found above (unlimited, the planner
        -- may join it as a scan of every asset filtered by that id)
        SELECT a.id, a.cum_count, a.cum_weight FROM inventory_asset AS a
        WHERE a.id = greatest(
            first_in.id, least(last_in.id, coalesce(by_weight.id, first_in.id), by_count.id)
        )
        LIMIT 1
    ) AS stop
    WHERE first_in.connector_id = p_connector AND (p_hi IS NULL OR first_in.id < p_hi)
$$;

-- tidemark_plan_batches over a connector's assets (the items of every job whose lag is not counted
-- outside, tidemark_lag_outside): the same ranges, each found by tidemark_asset_batch's probes, so
-- a plan costs O(batches x log(assets)), never a read of the items it covers (a backfill over a
-- million assets plans in a few thousand probes).
CREATE OR REPLACE FUNCTION tidemark_plan_assets(
    p_connector bigint, first_id bigint, end_id bigint, budget bigint, cap integer,
    max_batches integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    lo bigint := first_id;
    found record;
    emitted integer := 0;
BEGIN
    LOOP
        EXIT WHEN max_batches IS NOT NULL AND emitted >= max_batches;
        SELECT * INTO found FROM tidemark_asset_batch(p_connector, lo, end_id, budget, cap);
        EXIT WHEN found.upper IS NULL;
        lower := lo; upper := found.upper; item_count := found.item_count; weight := found.weight;
        RETURN NEXT;
        emitted := emitted + 1;
        EXIT WHEN found.exhausted;
        lo := found.upper;
    END LOOP;
END
$$;

-- The one planner entry: a connector's assets by their prefix sums (p_assets_of, the connector),
-- any other item query (a local meta table, a job_output's commits) by reading its rows.
CREATE OR REPLACE FUNCTION tidemark_plan_items(
    p_assets_of bigint, items_sql text, first_id bigint, end_id bigint, budget bigint,
    cap integer, max_batches integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_assets_of IS NOT NULL THEN
        RETURN QUERY SELECT * FROM tidemark_plan_assets(
            p_assets_of, first_id, end_id, budget, cap, max_batches
        );
    ELSE
        RETURN QUERY SELECT * FROM tidemark_plan_batches(
            items_sql, first_id, end_id, budget, cap, max_batches
        );
    END IF;
END
$$;

-- The connector whose assets are job p_job's items, or NULL when its items are counted outside
-- them (tidemark_lag_outside: a job_output's commits, a local meta table).
CREATE OR REPLACE FUNCTION tidemark_job_assets(p_job bigint)
RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT c.id FROM inventory_job AS j JOIN inventory_connector AS c ON c.id = j.connector_id
    WHERE j.id = p_job AND NOT tidemark_lag_outside(c.kind, c.config)
$$;

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
    assets_of bigint := tidemark_job_assets(p_job);  -- NULL: items read from p_items_sql
BEGIN
    SELECT * INTO planned
    FROM tidemark_plan_items(assets_of, p_items_sql, p_lo, p_hi, p_budget, p_cap, 1);
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

-- 0034: the connector's last asset below an id (tidemark_asset_before) and a job's lag
-- (tidemark_lag) in one place (schema/prefix_sums.sql), read as a row comparison in
-- asset_connector_id_idx's order: the planner walked the primary key backwards through the other
-- connectors' assets for "connector_id = C AND id < X ORDER BY id DESC LIMIT 1" (1.6 s for the
-- lag of 200 jobs whose watermark had no asset of their connector below it, 8 ms now). The
-- prefix-sum triggers use it too.

CREATE OR REPLACE FUNCTION tidemark_asset_before(p_connector bigint, p_before bigint)
RETURNS TABLE (id bigint, cum_count bigint, cum_weight numeric) LANGUAGE sql STABLE AS $$
    SELECT last.id, last.cum_count, last.cum_weight FROM (
        SELECT a.connector_id, a.id, a.cum_count, a.cum_weight FROM inventory_asset AS a
        WHERE (a.connector_id, a.id) < (p_connector, coalesce(p_before, 9223372036854775807))
        ORDER BY a.connector_id DESC, a.id DESC
        LIMIT 1
    ) AS last
    WHERE last.connector_id = p_connector
$$;

CREATE OR REPLACE FUNCTION tidemark_lag(p_connector bigint, p_position bigint)
RETURNS TABLE (items bigint, weight numeric) LANGUAGE sql STABLE AS $$
    SELECT coalesce(last.cum_count, 0) - coalesce(done.cum_count, 0),
           coalesce(last.cum_weight, 0) - coalesce(done.cum_weight, 0)
    FROM (SELECT 1) AS one
    LEFT JOIN tidemark_asset_before(p_connector, NULL) AS last ON true
    LEFT JOIN tidemark_asset_before(p_connector, p_position) AS done ON true
$$;

CREATE OR REPLACE FUNCTION tidemark_asset_prefix_rebuild(p_connector bigint, p_from bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    base_count bigint;
    base_weight numeric;
BEGIN
    SELECT b.cum_count, b.cum_weight INTO base_count, base_weight
    FROM tidemark_asset_before(p_connector, p_from) AS b;
    UPDATE inventory_asset AS a
    SET cum_count = s.cum_count, cum_weight = s.cum_weight
    FROM (
        SELECT id, coalesce(base_count, 0) + count(*) OVER w AS cum_count,
               coalesce(base_weight, 0) + sum(weight) OVER w AS cum_weight
        FROM inventory_asset WHERE connector_id = p_connector AND id >= p_from
        WINDOW w AS (ORDER BY id)
    ) AS s
    WHERE a.id = s.id
      AND (a.cum_count, a.cum_weight) IS DISTINCT FROM (s.cum_count, s.cum_weight);
END
$$;

CREATE OR REPLACE FUNCTION tidemark_asset_prefix_insert()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    before_count bigint;
    before_weight numeric;
BEGIN
    IF NEW.cum_count IS NOT NULL AND NEW.cum_weight IS NOT NULL THEN
        RETURN NEW;
    END IF;
    PERFORM 1 FROM inventory_connector WHERE id = NEW.connector_id FOR UPDATE;
    SELECT b.cum_count, b.cum_weight INTO before_count, before_weight
    FROM tidemark_asset_before(NEW.connector_id, NEW.id) AS b;
    NEW.cum_count := coalesce(before_count, 0) + 1;
    NEW.cum_weight := coalesce(before_weight, 0) + NEW.weight;
    UPDATE inventory_asset
    SET cum_count = cum_count + 1, cum_weight = cum_weight + NEW.weight
    WHERE connector_id = NEW.connector_id AND id > NEW.id;
    RETURN NEW;
END
$$;

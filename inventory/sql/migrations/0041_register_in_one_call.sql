-- 0041: asset registration in one call whose plans the session keeps, and the prefix-sum trigger
-- no longer called for the rows that registration fills itself.
-- - tidemark_assets_register: the connector's row lock and the registering INSERT were two
--   statements from the driver, each planned at every call (0.7 ms of planning for the INSERT of a
--   discovery's 100 new files); the function returns the added rows, so discovery extends its
--   copy of the registered locations without reading them back.
-- - tidemark_asset_prefix_insert ran once per inserted row only to return at once when the row
--   already had its sums (0.4 ms for 100 rows); its WHEN clause now says so.

CREATE OR REPLACE FUNCTION tidemark_assets_register(
    p_connector bigint, p_locations text[], p_weights bigint[], p_extras text[]
) RETURNS TABLE(previous_id bigint, id bigint, location text, discovered_at float8)
LANGUAGE plpgsql SET plan_cache_mode TO 'force_generic_plan' AS $$
DECLARE
    last_id bigint;
    last_count bigint;
    last_weight numeric;
BEGIN
    PERFORM 1 FROM inventory_connector AS c WHERE c.id = p_connector FOR UPDATE;
    SELECT b.id, b.cum_count, b.cum_weight INTO last_id, last_count, last_weight
    FROM tidemark_asset_before(p_connector, NULL) AS b;
    RETURN QUERY
    WITH given AS (
        SELECT DISTINCT ON (t.location) t.location, t.weight, t.extra, t.ord
        FROM unnest(p_locations, p_weights, p_extras) WITH ORDINALITY
             AS t(location, weight, extra, ord)
        WHERE NOT EXISTS (
            -- OFFSET 0 keeps this a lookup per given location on asset_connector_location_unique:
            -- as an anti-join the planner read every asset of the connector (a hash of 50,000
            -- locations to register 100)
            SELECT 1 FROM inventory_asset AS known
            WHERE known.connector_id = p_connector AND known.location = t.location
            OFFSET 0
        )
        ORDER BY t.location, t.ord
    ), added AS (
        INSERT INTO inventory_asset AS a (
            connector_id, location, weight, extra, discovered_at, cum_count, cum_weight
        )
        SELECT p_connector, g.location, g.weight, g.extra::jsonb, now(),
               coalesce(last_count, 0) + row_number() OVER w,
               coalesce(last_weight, 0) + sum(g.weight) OVER w
        FROM given AS g
        WINDOW w AS (ORDER BY g.ord)
        ORDER BY g.ord
        RETURNING a.id, a.location, extract(epoch FROM a.discovered_at)::float8 AS discovered_at
    )
    SELECT coalesce(last_id, 0), added.id, added.location, added.discovered_at
    FROM added ORDER BY added.id;
END
$$;

DROP TRIGGER tidemark_asset_prefix_insert ON inventory_asset;
CREATE TRIGGER tidemark_asset_prefix_insert BEFORE INSERT ON inventory_asset
    FOR EACH ROW WHEN (NEW.cum_count IS NULL OR NEW.cum_weight IS NULL)
    EXECUTE FUNCTION tidemark_asset_prefix_insert();

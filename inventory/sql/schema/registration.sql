-- Asset registration (inventory/services/assets.py): ids in visibility order, invariant 5.
--
-- The connector's row lock is taken first and held until the caller commits, so two
-- registrations of one connector never interleave: a reader resuming after id N never later sees
-- a smaller id of that connector appear. New locations only, in the order given (a location given
-- twice counts once, at its first place), none of the id sequence spent on a known one. Each row
-- carries the connector's running count and weight up to it (Asset.cum_count, cum_weight),
-- continued from its last asset under the same lock, so a job's lag is two index lookups
-- (prefix_sums.sql); the BEFORE INSERT trigger that fills them for other writers does not fire
-- for these rows (its WHEN clause).
--
-- Returns the rows it added, in id order, each with the id of the connector's last asset before
-- them (0: none): while the lock is held no other asset of the connector can appear, so the added
-- rows are exactly the connector's assets in (previous_id, last returned id], which lets
-- discovery extend its copy of the registered locations without reading them back
-- (sources/files_known.py). PL/pgSQL, so the session keeps both statements' plans (a statement
-- sent by the driver is planned at every call); generic plans, as the lookups are by key
-- whatever the arrays hold.
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

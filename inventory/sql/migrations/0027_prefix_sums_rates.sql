-- 0027: prefix sums of each connector's assets (lag in two index lookups) and the hourly rates
-- rollup (last-day rates without counting batches). The functions are those of
-- schema/prefix_sums.sql and schema/rates.sql.

-- Prefix sums of a connector's assets (Asset.cum_count, Asset.cum_weight): the running count and
-- weight of the connector's assets up to and including each one, in id order. A job's lag is then
-- (cum at the connector's last asset) - (cum at the last asset before its watermark): two index
-- lookups on asset_connector_id_idx, whatever the backlog (selectors.jobs_lag_by_id).
--
-- The registering INSERT fills them itself under the connector's row lock (queries.sql:
-- assets_register). These triggers keep them true for every other change: an insert that leaves
-- them NULL (the ORM, the admin, a test's factory), a delete of some of a connector's assets, a
-- weight change (a table slice recounted by a restatement). Each takes the connector's row lock,
-- the lock registration holds, so the sums never race a registration.

-- Recompute the sums of a connector's assets from id p_from on, continuing from the asset before
-- it. The caller holds the connector's row lock. Costs the rows from p_from to the end (only those
-- whose sums change are written): a change near the end, where restatements and registrations
-- happen, is cheap.
CREATE OR REPLACE FUNCTION tidemark_asset_prefix_rebuild(p_connector bigint, p_from bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    base_count bigint;
    base_weight numeric;
BEGIN
    SELECT cum_count, cum_weight INTO base_count, base_weight FROM inventory_asset
    WHERE connector_id = p_connector AND id < p_from ORDER BY id DESC LIMIT 1;
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

-- BEFORE INSERT, each row: an insert that did not compute its sums (anything but assets_register)
-- gets them here, under the connector's row lock; an id below the connector's last one (an
-- explicit id) moves the sums of the assets after it.
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
    SELECT cum_count, cum_weight INTO before_count, before_weight FROM inventory_asset
    WHERE connector_id = NEW.connector_id AND id < NEW.id ORDER BY id DESC LIMIT 1;
    NEW.cum_count := coalesce(before_count, 0) + 1;
    NEW.cum_weight := coalesce(before_weight, 0) + NEW.weight;
    UPDATE inventory_asset
    SET cum_count = cum_count + 1, cum_weight = cum_weight + NEW.weight
    WHERE connector_id = NEW.connector_id AND id > NEW.id;
    RETURN NEW;
END
$$;

-- AFTER DELETE, each statement: the assets after the first deleted one of each connector get their
-- sums again (nothing to do when a connector's assets all go: a reset, a deleted connector).
CREATE OR REPLACE FUNCTION tidemark_asset_prefix_delete()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed record;
BEGIN
    FOR changed IN
        SELECT connector_id, min(id) AS first FROM tidemark_gone GROUP BY connector_id ORDER BY 1
    LOOP
        PERFORM 1 FROM inventory_connector WHERE id = changed.connector_id FOR UPDATE;
        PERFORM tidemark_asset_prefix_rebuild(changed.connector_id, changed.first);
    END LOOP;
    RETURN NULL;
END
$$;

-- AFTER UPDATE, each statement: the assets whose weight (or connector) changed, and those after
-- them, get their sums again. The rebuild's own updates (trigger depth > 1) change no weight.
CREATE OR REPLACE FUNCTION tidemark_asset_prefix_update()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed record;
BEGIN
    IF pg_trigger_depth() > 1 THEN
        RETURN NULL;
    END IF;
    FOR changed IN
        SELECT connector_id, min(id) AS first FROM (
            SELECT o.connector_id, o.id FROM tidemark_old AS o JOIN tidemark_new AS n ON n.id = o.id
            WHERE n.weight IS DISTINCT FROM o.weight OR n.connector_id <> o.connector_id
            UNION ALL
            SELECT n.connector_id, n.id FROM tidemark_old AS o JOIN tidemark_new AS n ON n.id = o.id
            WHERE n.connector_id <> o.connector_id
        ) AS moved
        GROUP BY connector_id ORDER BY 1
    LOOP
        PERFORM 1 FROM inventory_connector WHERE id = changed.connector_id FOR UPDATE;
        PERFORM tidemark_asset_prefix_rebuild(changed.connector_id, changed.first);
    END LOOP;
    RETURN NULL;
END
$$;

-- The last-day rates' rollup (models.JobHourlyRates): attempts finished per job and UTC clock hour,
-- succeeded and failed, with the items and weight of the succeeded ones. Kept by a trigger on the
-- attempt row that finishes, so it is written in the transaction that commits (tidemark_succeed)
-- or fails (lifecycle._fail, the reaper) the attempt, by every path, and the dashboard reads at
-- most 24 rows per job instead of counting the day's batches (selectors_health.jobs_rates).

-- AFTER INSERT or UPDATE of an attempt, each row that finished (outcome set, it was '' before).
-- A job's first count in a new hour also removes its rows older than two days (nothing reads
-- them), so the rollup stays small without a periodic step.
CREATE OR REPLACE FUNCTION tidemark_rates_count()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_job bigint;
    v_items bigint;
    v_weight numeric;
    v_hour timestamptz;
    v_ok integer;
BEGIN
    SELECT job_id, item_count, weight INTO v_job, v_items, v_weight
    FROM inventory_batch WHERE id = NEW.batch_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_hour := date_trunc('hour', NEW.finished_at, 'UTC');
    v_ok := CASE WHEN NEW.outcome = 'succeeded' THEN 1 ELSE 0 END;
    UPDATE inventory_jobhourlyrates
    SET succeeded = succeeded + v_ok, failed = failed + 1 - v_ok,
        items = items + v_ok * v_items, weight = weight + v_ok * v_weight
    WHERE job_id = v_job AND hour = v_hour;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    DELETE FROM inventory_jobhourlyrates
    WHERE job_id = v_job AND hour < v_hour - interval '2 days';
    INSERT INTO inventory_jobhourlyrates (job_id, hour, succeeded, failed, items, weight)
    VALUES (v_job, v_hour, v_ok, 1 - v_ok, v_ok * v_items, v_ok * v_weight)
    ON CONFLICT (job_id, hour) DO UPDATE
    SET succeeded = inventory_jobhourlyrates.succeeded + excluded.succeeded,
        failed = inventory_jobhourlyrates.failed + excluded.failed,
        items = inventory_jobhourlyrates.items + excluded.items,
        weight = inventory_jobhourlyrates.weight + excluded.weight;
    RETURN NULL;
END
$$;

-- the existing assets' sums: one window pass per connector, before the triggers exist
UPDATE inventory_asset AS a
SET cum_count = s.cum_count, cum_weight = s.cum_weight
FROM (
    SELECT id, count(*) OVER w AS cum_count, sum(weight) OVER w AS cum_weight
    FROM inventory_asset WINDOW w AS (PARTITION BY connector_id ORDER BY id)
) AS s
WHERE a.id = s.id;

CREATE TRIGGER tidemark_asset_prefix_insert BEFORE INSERT ON inventory_asset
    FOR EACH ROW EXECUTE FUNCTION tidemark_asset_prefix_insert();
CREATE TRIGGER tidemark_asset_prefix_delete AFTER DELETE ON inventory_asset
    REFERENCING OLD TABLE AS tidemark_gone
    FOR EACH STATEMENT EXECUTE FUNCTION tidemark_asset_prefix_delete();
CREATE TRIGGER tidemark_asset_prefix_update AFTER UPDATE ON inventory_asset
    REFERENCING OLD TABLE AS tidemark_old NEW TABLE AS tidemark_new
    FOR EACH STATEMENT EXECUTE FUNCTION tidemark_asset_prefix_update();

-- the last two days of finished attempts, counted once; the triggers count every later one
INSERT INTO inventory_jobhourlyrates (job_id, hour, succeeded, failed, items, weight)
SELECT b.job_id, date_trunc('hour', a.finished_at, 'UTC'),
       count(*) FILTER (WHERE a.outcome = 'succeeded'),
       count(*) FILTER (WHERE a.outcome <> 'succeeded'),
       coalesce(sum(b.item_count) FILTER (WHERE a.outcome = 'succeeded'), 0),
       coalesce(sum(b.weight) FILTER (WHERE a.outcome = 'succeeded'), 0)
FROM inventory_batchattempt AS a JOIN inventory_batch AS b ON b.id = a.batch_id
WHERE a.outcome <> '' AND a.finished_at >= statement_timestamp() - interval '2 days'
GROUP BY 1, 2;

CREATE TRIGGER tidemark_rates_count_insert AFTER INSERT ON inventory_batchattempt
    FOR EACH ROW WHEN (NEW.outcome <> '' AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION tidemark_rates_count();
CREATE TRIGGER tidemark_rates_count_update AFTER UPDATE ON inventory_batchattempt
    FOR EACH ROW WHEN (OLD.outcome = '' AND NEW.outcome <> '' AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION tidemark_rates_count();

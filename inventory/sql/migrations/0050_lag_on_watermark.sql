-- 0050: a watermark carries the prefix sums below its position (Watermark.done_count,
-- done_weight), so a job's lag is the sums at its connector's last asset minus its watermark's,
-- with no probe of the assets per job: /metrics at 10,000 jobs made 10,000 of them at every
-- scrape (dashboard.sql: health_metrics, health_all).
-- - tidemark_watermark_done: BEFORE INSERT or UPDATE of a watermark, its sums computed afresh (one
--   probe), in the transaction that moves it, whoever writes it.
-- - tidemark_watermarks_resum: the watermarks of a connector's jobs take their sums again when the
--   assets' sums below them change: after an insert (tidemark_asset_watermarks_insert, a new
--   statement trigger), a delete or a weight change (the prefix-sum triggers).
-- - every watermark's sums filled once, at the end.


CREATE OR REPLACE FUNCTION tidemark_watermark_done()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT coalesce(b.cum_count, 0), coalesce(b.cum_weight, 0)
    INTO NEW.done_count, NEW.done_weight
    FROM inventory_job AS j
    LEFT JOIN LATERAL tidemark_asset_before(j.connector_id, NEW.position) AS b ON true
    WHERE j.id = NEW.job_id;
    NEW.done_count := coalesce(NEW.done_count, 0);
    NEW.done_weight := coalesce(NEW.done_weight, 0);
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION tidemark_watermarks_resum(p_connector bigint, p_from bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE inventory_watermark AS w SET done_count = w.done_count  -- recomputed by its trigger
    FROM inventory_job AS j
    WHERE j.connector_id = p_connector AND w.job_id = j.id
      AND (p_from IS NULL OR w.position > p_from);
END
$$;

CREATE OR REPLACE FUNCTION tidemark_asset_watermarks_insert()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed record;
BEGIN
    FOR changed IN
        SELECT connector_id, min(id) AS first FROM tidemark_added GROUP BY connector_id ORDER BY 1
    LOOP
        PERFORM tidemark_watermarks_resum(changed.connector_id, changed.first);
    END LOOP;
    RETURN NULL;
END
$$;

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
        PERFORM tidemark_watermarks_resum(changed.connector_id, NULL);
    END LOOP;
    RETURN NULL;
END
$$;

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
        PERFORM tidemark_watermarks_resum(changed.connector_id, NULL);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER tidemark_watermark_done BEFORE INSERT OR UPDATE ON inventory_watermark
    FOR EACH ROW EXECUTE FUNCTION tidemark_watermark_done();
CREATE TRIGGER tidemark_asset_watermarks_insert AFTER INSERT ON inventory_asset
    REFERENCING NEW TABLE AS tidemark_added
    FOR EACH STATEMENT EXECUTE FUNCTION tidemark_asset_watermarks_insert();

-- every watermark's sums, by its trigger
UPDATE inventory_watermark SET done_count = done_count;

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

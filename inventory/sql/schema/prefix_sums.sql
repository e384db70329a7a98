-- Prefix sums of a connector's assets (Asset.cum_count, Asset.cum_weight): the running count and
-- weight of the connector's assets up to and including each one, in id order. A job's lag is then
-- (cum at the connector's last asset) - (cum at the last asset before its watermark): two index
-- lookups on asset_connector_id_idx, whatever the backlog (tidemark_lag below).
--
-- Registration fills them itself under the connector's row lock (registration.sql:
-- tidemark_assets_register). These triggers keep them true for every other change: an insert that leaves
-- them NULL (the ORM, the admin, a test's factory), a delete of some of a connector's assets, a
-- weight change (a table slice recounted by a restatement). Each takes the connector's row lock,
-- the lock registration holds, so the sums never race a registration.

-- The connector's last asset with an id below p_before (NULL: its last asset), with its prefix
-- sums; no row when it has none. One step of asset_connector_id_idx, written as a row comparison
-- in that index's order: "connector_id = C AND id < X ORDER BY id DESC LIMIT 1" lets the planner
-- walk the primary key backwards through every asset of the other connectors in between (a
-- connector whose assets are sparse among busy ones' cost seconds per lookup). Inlined where it
-- is called from FROM (one SELECT, SQL, STABLE) with arguments free of subqueries; ROWS 1 where it
-- is not (the planner's default for a function is 1,000 rows).
CREATE OR REPLACE FUNCTION tidemark_asset_before(p_connector bigint, p_before bigint)
RETURNS TABLE (id bigint, cum_count bigint, cum_weight numeric) LANGUAGE sql STABLE ROWS 1 AS $$
    SELECT last.id, last.cum_count, last.cum_weight FROM (
        SELECT a.connector_id, a.id, a.cum_count, a.cum_weight FROM inventory_asset AS a
        WHERE (a.connector_id, a.id) < (p_connector, coalesce(p_before, 9223372036854775807))
        ORDER BY a.connector_id DESC, a.id DESC
        LIMIT 1
    ) AS last
    WHERE last.connector_id = p_connector
$$;

-- A job's lag: the count and weight of connector p_connector's assets at or after p_position
-- (its watermark), the sums at the connector's last asset minus those before p_position. Two
-- steps of asset_connector_id_idx whatever the backlog; no step at all for a NULL connector
-- (callers pass NULL for the jobs whose lag they do not need) and then (0, 0). ROWS 1: planned
-- as 1,000 rows per job, the /metrics statement at 10,000 jobs (estimated at 10^10 rows) read
-- its jobs by name to spare itself the sort, and joined each to every job's open batches.
CREATE OR REPLACE FUNCTION tidemark_lag(p_connector bigint, p_position bigint)
RETURNS TABLE (items bigint, weight numeric) LANGUAGE sql STABLE ROWS 1 AS $$
    SELECT coalesce(last.cum_count, 0) - coalesce(done.cum_count, 0),
           coalesce(last.cum_weight, 0) - coalesce(done.cum_weight, 0)
    FROM (SELECT 1) AS one
    LEFT JOIN tidemark_asset_before(p_connector, NULL) AS last ON true
    LEFT JOIN tidemark_asset_before(p_connector, p_position) AS done ON true
$$;

-- A watermark's own prefix sums (Watermark.done_count, done_weight): the count and weight of its
-- job's connector's assets below its position, so that a job's lag is the sums at the connector's
-- last asset minus these, read from the watermark's row: /metrics reads 10,000 jobs' lags without
-- a probe of the assets per job (dashboard.sql: health_metrics). BEFORE INSERT or UPDATE of a
-- watermark, each row: computed afresh by one probe of asset_connector_id_idx whatever the writer
-- (the commit's tidemark_advance, a correction, a skip, a reset, the ORM), in the transaction that
-- moves the position, so the sums move with it, and a value a writer brings along is never
-- kept. Zero for a job whose lag is counted outside (tidemark_lag_outside): no assets.
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

-- The assets' sums below a position changed (an asset inserted, deleted or reweighed at or after
-- p_from; every writer but a bulk load holds the connector's row lock): the watermarks of the connector's jobs
-- past p_from take theirs again (the row trigger above recomputes them; NULL p_from: every job's).
-- An insert passes its first id: only a watermark placed past ids not yet seen (a job's start, a
-- correction skipping unseen items) has assets appear below it, so a registration usually
-- updates no row. A delete or a weight change passes NULL: every watermark of the connector is
-- updated, waiting for a commit that holds one, so a commit that read the old sums (its position
-- moving past p_from meanwhile) is followed by this update, which reads the new ones.
CREATE OR REPLACE FUNCTION tidemark_watermarks_resum(p_connector bigint, p_from bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE inventory_watermark AS w SET done_count = w.done_count  -- recomputed by its trigger
    FROM inventory_job AS j
    WHERE j.connector_id = p_connector AND w.job_id = j.id
      AND (p_from IS NULL OR w.position > p_from);
END
$$;

-- Whether a job's lag is counted outside the prefix sums, in the tables it reads: a job_output
-- connector's (the upstream job's commits) and a local meta table read in place. A remote meta
-- table (dsn_env) is mirrored into Tidemark's asset table, so it has prefix sums. The one rule,
-- for queries.sql (jobs_lag) and dashboard.sql (job_health, outside_jobs); inlined (SQL, IMMUTABLE).
CREATE OR REPLACE FUNCTION tidemark_lag_outside(p_kind text, p_config jsonb)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_kind = 'job_output'
           OR (coalesce(p_config ? 'meta_table', false) AND NOT coalesce(p_config ? 'dsn_env', false))
$$;

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
    ELSIF max_batches = 1 THEN
        -- one batch (acquire, a plan step): tidemark_plan_batches' own first step, called here
        -- so an acquire's item read goes through one function fewer (migration 0051)
        RETURN QUERY SELECT * FROM tidemark_plan_one(items_sql, first_id, end_id, budget, cap);
    ELSE
        RETURN QUERY SELECT * FROM tidemark_plan_batches(
            items_sql, first_id, end_id, budget, cap, max_batches
        );
    END IF;
END
$$;

-- The connector whose assets are job p_job's items, or NULL when its items are counted outside
-- them (tidemark_lag_outside: a job_output's commits, a local meta table). PL/pgSQL, so its plan
-- is cached by the session: a SQL function with a FROM is never inlined and was planned anew at
-- every call (0.12 ms of every acquire, migration 0040).
CREATE OR REPLACE FUNCTION tidemark_job_assets(p_job bigint)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        SELECT c.id FROM inventory_job AS j JOIN inventory_connector AS c ON c.id = j.connector_id
        WHERE j.id = p_job AND NOT tidemark_lag_outside(c.kind, c.config)
    );
END
$$;

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

-- BEFORE INSERT, each row: an insert that did not compute its sums (anything but registration; the
-- trigger's WHEN clause, migration 0041, skips the rows that have them) gets them here, under the connector's row lock; an id below the connector's last one (an
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

-- AFTER INSERT, each statement, whoever inserts (registration, which fills the sums itself, or
-- the trigger above): the watermarks past the first added id of each connector take their sums
-- again (tidemark_watermarks_resum). Usually no row: only a watermark placed past ids not seen yet
-- (a job's start, a correction skipping unseen items) has assets appear below it. One lookup of
-- the connector's jobs per insert.
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

-- AFTER DELETE, each statement: the assets after the first deleted one of each connector get their
-- sums again (nothing to do when a connector's assets all go: a reset, a deleted connector), and
-- the watermarks of its jobs theirs (tidemark_watermarks_resum).
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

-- AFTER UPDATE, each statement: the assets whose weight (or connector) changed, and those after
-- them, get their sums again, and the watermarks of the connector's jobs theirs. The rebuild's own
-- updates (trigger depth > 1) change no weight.
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

-- The overview's, the alerts' and /metrics' reads (inventory/selectors_health.py,
-- selectors_alerts.py), each under `-- name: <name>`, read with inventory.sql.dashboard_query.
--
-- `job_health` is the one definition of a job's state: a WITH list ending in `health`, one row
-- per job with its open batch counts, its lag (prefix sums: two probes of asset_connector_id_idx
-- per job, whatever the backlog), how late its watermark is and its state. The statements below
-- are `job_health` followed by what they select from `health`, so the counts by state, the
-- overview's page and the alerts read the same rule. Parameters:
--   %(ext_ids)s, %(ext_items)s, %(ext_weights)s: the lag of the jobs that do not read Tidemark's
--     asset table (a local meta table read in place, a job_output connector), counted by the caller
--     in their own tables (selectors.job_lag); items NULL: unreadable now;
--   %(stale)s: the schedule intervals a watermark may sit still (plus a lease) before it is late;
--   %(states)s: the states, the ones that need a person first (selectors_health.STATES).

-- name: job_health
WITH ext (job_id, items, weight) AS (
    SELECT * FROM unnest(%(ext_ids)s::bigint[], %(ext_items)s::bigint[], %(ext_weights)s::bigint[])
),
open_batches AS (
    SELECT job_id,
           count(*) FILTER (WHERE status = 'queued') AS n_queued,
           count(*) FILTER (WHERE status = 'running') AS n_running,
           count(*) FILTER (WHERE status = 'failed') AS n_failed,
           count(*) FILTER (WHERE status = 'dead') AS n_dead
    FROM inventory_batch
    WHERE status IN ('queued', 'running', 'failed', 'dead')
    GROUP BY job_id
),
facts AS (
    SELECT j.id, j.name, j.paused, j.schedule_seconds, j.lease_seconds, j.watermark_type,
           c.name AS connector_name, c.state AS connector_state, c.kind AS connector_kind,
           c.config AS connector_config, w.type AS wm_type, w.value AS wm_value,
           w.position AS wm_position, w.updated_at AS wm_updated_at,
           coalesce(o.n_queued, 0) AS n_queued, coalesce(o.n_running, 0) AS n_running,
           coalesce(o.n_failed, 0) AS n_failed, coalesce(o.n_dead, 0) AS n_dead,
           CASE WHEN x.outside THEN e.items
                ELSE coalesce(last.cum_count, 0) - coalesce(done.cum_count, 0) END AS lag_items,
           CASE WHEN x.outside THEN e.weight
                ELSE coalesce(last.cum_weight, 0) - coalesce(done.cum_weight, 0) END AS lag_weight
    FROM inventory_job AS j
    JOIN inventory_connector AS c ON c.id = j.connector_id
    JOIN inventory_watermark AS w ON w.job_id = j.id
    -- the jobs whose lag the caller counted (see queries.sql: jobs_lag)
    CROSS JOIN LATERAL (
        SELECT c.kind = 'job_output'
               OR (coalesce(c.config ? 'meta_table', false)
                   AND NOT coalesce(c.config ? 'dsn_env', false)) AS outside
    ) AS x
    LEFT JOIN open_batches AS o ON o.job_id = j.id
    LEFT JOIN ext AS e ON e.job_id = j.id
    LEFT JOIN LATERAL (
        SELECT a.cum_count, a.cum_weight FROM inventory_asset AS a
        WHERE NOT x.outside AND a.connector_id = j.connector_id ORDER BY a.id DESC LIMIT 1
    ) AS last ON true
    LEFT JOIN LATERAL (
        SELECT a.cum_count, a.cum_weight FROM inventory_asset AS a
        WHERE NOT x.outside AND a.connector_id = j.connector_id AND a.id < w.position
        ORDER BY a.id DESC LIMIT 1
    ) AS done ON true
),
timed AS (
    -- late: on an interval schedule, items waiting, and the watermark still for longer than
    -- `stale` intervals plus a lease (a paused job or a connector not active is never late)
    SELECT f.*,
           CASE WHEN NOT f.paused AND f.connector_state = 'active' AND f.schedule_seconds > 0
                     AND f.lag_items > 0
                     AND statement_timestamp() - f.wm_updated_at > make_interval(
                         secs => %(stale)s * f.schedule_seconds + f.lease_seconds)
                THEN statement_timestamp() - f.wm_updated_at END AS late
    FROM facts AS f
),
health AS (
    SELECT t.*, s.state, array_position(%(states)s::text[], s.state) AS state_rank
    FROM timed AS t
    CROSS JOIN LATERAL (
        SELECT CASE WHEN t.paused THEN 'paused'
                    WHEN t.connector_state <> 'active' THEN 'connector'
                    WHEN t.n_dead > 0 THEN 'blocked'
                    WHEN t.late IS NOT NULL THEN 'late'
                    WHEN t.n_failed > 0 THEN 'failing'
                    WHEN t.lag_items IS NULL THEN 'unreadable'
                    WHEN t.lag_items > 0 THEN 'catching_up'
                    ELSE 'current' END AS state
    ) AS s
)

-- name: outside_jobs
-- The jobs whose lag job_health does not read from prefix sums (their lag is counted in their own
-- tables): few, loaded as models by the caller.
SELECT j.id FROM inventory_job AS j JOIN inventory_connector AS c ON c.id = j.connector_id
WHERE c.kind = 'job_output'
   OR (coalesce(c.config ? 'meta_table', false) AND NOT coalesce(c.config ? 'dsn_env', false));

-- name: health_counts
-- (state, jobs in that state, of them matching %(q)s, of them with dead batches, of them with a
-- late watermark): the overview's state filter and totals, and the sizes of the job alerts' kinds.
SELECT state, count(*),
       count(*) FILTER (WHERE %(q)s = '' OR strpos(lower(name), %(q)s) > 0
                              OR strpos(lower(connector_name), %(q)s) > 0),
       count(*) FILTER (WHERE n_dead > 0), count(*) FILTER (WHERE late IS NOT NULL)
FROM health GROUP BY state;

-- name: health_page
-- One page of jobs whose job or connector name contains %(q)s and whose state is %(state)s (any
-- when ''), those that need a person first, then by name.
SELECT id, name, paused, schedule_seconds, lease_seconds, watermark_type, connector_name,
       connector_state, connector_kind, connector_config, wm_type, wm_value, wm_position,
       wm_updated_at, n_queued, n_running, n_failed, n_dead, lag_items, lag_weight, late, state
FROM health
WHERE (%(q)s = '' OR strpos(lower(name), %(q)s) > 0 OR strpos(lower(connector_name), %(q)s) > 0)
  AND (%(state)s = '' OR state = %(state)s)
ORDER BY state_rank, name
LIMIT %(limit)s OFFSET %(offset)s;

-- name: health_all
-- Every job's row, by name (/metrics).
SELECT id, name, paused, schedule_seconds, lease_seconds, watermark_type, connector_name,
       connector_state, connector_kind, connector_config, wm_type, wm_value, wm_position,
       wm_updated_at, n_queued, n_running, n_failed, n_dead, lag_items, lag_weight, late, state
FROM health ORDER BY name;

-- name: health_dead_alerts
-- A slice of the jobs with dead batches, by name: (id, name, dead batches). The jobs of `health`
-- whose open_batches count a dead one; it reads no lag (the alert does not depend on it), so it
-- costs no asset probe.
SELECT j.id, j.name, o.n_dead
FROM open_batches AS o
JOIN inventory_job AS j ON j.id = o.job_id
JOIN inventory_watermark AS w ON w.job_id = j.id
WHERE o.n_dead > 0
ORDER BY j.name LIMIT %(limit)s OFFSET %(offset)s;

-- name: health_late_alerts
-- A slice of the jobs with a late watermark, by name: (id, name, late, schedule, items waiting).
SELECT id, name, late, schedule_seconds, lag_items FROM health WHERE late IS NOT NULL
ORDER BY name LIMIT %(limit)s OFFSET %(offset)s;

-- name: waiting_connectors
-- A slice of the connectors waiting on another, by name.
SELECT name, start_after FROM inventory_connector WHERE state = 'waiting'
ORDER BY name LIMIT %(limit)s OFFSET %(offset)s;

-- name: waiting_connectors_count
SELECT count(*) FROM inventory_connector WHERE state = 'waiting';

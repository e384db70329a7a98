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
--   %(states)s: the states, the ones that need a person first (selectors_health.STATES);
--   %(ids)s: the jobs to read (NULL: every job). A statement about a few jobs (health_of: the
--     API's page of jobs) reads their open batches and their connectors' last assets only, not
--     every job's and connector's (at 10,000 jobs, 40,000 open batches aggregated and 1,000
--     probes for a page of 100); NULL is folded away by the planner, the others read as before.

-- name: job_health
WITH ext (job_id, items, weight) AS (
    SELECT * FROM unnest(%(ext_ids)s::bigint[], %(ext_items)s::bigint[], %(ext_weights)s::bigint[])
),
open_batches AS (
    -- one pass over the open batches: the counts by status (the state) and, in one array in the
    -- order of selectors_health.OPEN_BY_KIND, by kind and status (/metrics' tidemark_batches)
    SELECT job_id,
           count(*) FILTER (WHERE status = 'queued') AS n_queued,
           count(*) FILTER (WHERE status = 'running') AS n_running,
           count(*) FILTER (WHERE status = 'failed') AS n_failed,
           count(*) FILTER (WHERE status = 'dead') AS n_dead,
           ARRAY[count(*) FILTER (WHERE kind = 'incremental' AND status = 'queued'),
                 count(*) FILTER (WHERE kind = 'incremental' AND status = 'running'),
                 count(*) FILTER (WHERE kind = 'incremental' AND status = 'failed'),
                 count(*) FILTER (WHERE kind = 'incremental' AND status = 'dead'),
                 count(*) FILTER (WHERE kind = 'backfill' AND status = 'queued'),
                 count(*) FILTER (WHERE kind = 'backfill' AND status = 'running'),
                 count(*) FILTER (WHERE kind = 'backfill' AND status = 'failed'),
                 count(*) FILTER (WHERE kind = 'backfill' AND status = 'dead')] AS by_kind
    FROM inventory_batch
    WHERE status IN ('queued', 'running', 'failed', 'dead')
      AND (%(ids)s::bigint[] IS NULL OR job_id = ANY(%(ids)s::bigint[]))
    GROUP BY job_id
),
tips AS (
    -- each connector's last asset, its id and its prefix sums: one probe of asset_connector_id_idx
    -- per connector, however many jobs read it (the lag is read only for the rows a statement
    -- returns). A join, not a scalar subquery: `behind` below is computed from it and passed to
    -- tidemark_lag, which PostgreSQL inlines only when its arguments hold no subquery
    SELECT c.id AS connector_id, t.id AS tip_id, t.cum_count AS tip_count,
           t.cum_weight AS tip_weight
    FROM inventory_connector AS c LEFT JOIN LATERAL tidemark_asset_before(c.id, NULL) AS t ON true
    WHERE %(ids)s::bigint[] IS NULL
       OR c.id IN (SELECT connector_id FROM inventory_job WHERE id = ANY(%(ids)s::bigint[]))
),
facts AS (
    -- behind: items wait at or after the watermark (NULL: unreadable now). A state needs no
    -- more than that; the lag itself (the prefix sums at the connector's last asset and before
    -- the watermark: two probes) is read only for the rows a statement returns
    -- (narrow: what the states, the counts and the orders read; the statements add the job's,
    -- connector's and watermark's other columns to the rows they return)
    SELECT j.id, j.name, j.paused, j.schedule_seconds, j.lease_seconds, j.connector_id,
           c.name AS connector_name, c.state AS connector_state,
           w.position AS wm_position, w.updated_at AS wm_updated_at,
           -- the sums below the watermark, kept on its row (prefix_sums.sql:
           -- tidemark_watermark_done): the lag of every job with no probe of the assets
           w.done_count AS wm_done_count, w.done_weight AS wm_done_weight,
           -- a datetime watermark's value (its time lag), for /metrics' rows without a second
           -- join of the watermarks
           CASE WHEN j.watermark_type = 'datetime' THEN w.value #>> '{}' END AS wm_datetime,
           coalesce(o.n_queued, 0) AS n_queued, coalesce(o.n_running, 0) AS n_running,
           coalesce(o.n_failed, 0) AS n_failed, coalesce(o.n_dead, 0) AS n_dead,
           o.by_kind AS open_by_kind,
           x.outside, tp.tip_id, tp.tip_count, tp.tip_weight,
           e.items AS ext_items, e.weight AS ext_weight,
           CASE WHEN x.outside THEN e.items > 0
                ELSE coalesce(tp.tip_id >= w.position, false) END AS behind
    FROM inventory_job AS j
    JOIN inventory_connector AS c ON c.id = j.connector_id
    JOIN inventory_watermark AS w ON w.job_id = j.id
    -- the jobs whose lag the caller counted (see queries.sql: jobs_lag)
    CROSS JOIN LATERAL (SELECT tidemark_lag_outside(c.kind, c.config) AS outside) AS x
    LEFT JOIN open_batches AS o ON o.job_id = j.id
    LEFT JOIN ext AS e ON e.job_id = j.id
    LEFT JOIN tips AS tp ON tp.connector_id = j.connector_id
    WHERE %(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[])
),
timed AS (
    -- late: on an interval schedule, items waiting, and the watermark still for longer than
    -- `stale` intervals plus a lease (a paused job or a connector not active is never late)
    SELECT f.*,
           CASE WHEN NOT f.paused AND f.connector_state = 'active' AND f.schedule_seconds > 0
                     AND f.behind
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
                    WHEN t.behind IS NULL THEN 'unreadable'
                    WHEN t.behind THEN 'catching_up'
                    ELSE 'current' END AS state
    ) AS s
)

-- name: outside_jobs
-- The jobs whose lag job_health does not read from prefix sums (their lag is counted in their own
-- tables): few, loaded as models by the caller.
SELECT j.id FROM inventory_job AS j JOIN inventory_connector AS c ON c.id = j.connector_id
WHERE tidemark_lag_outside(c.kind, c.config);

-- name: health_read
-- One read of `health` for a page (the overview, /api/v1/alerts/): its counts and its slices.
--   rows ('count', state, jobs, of them matching %(q)s and %(connector)s, of them with dead batches, of them late):
--     the overview's state filter and totals, and the sizes of the job alerts' kinds;
--   rows ('page', ...job row): the jobs whose job or connector name contains %(q)s, of the
--     connector named %(connector)s (any when ''), and whose state is %(state)s (any when ''),
--     those that need a person first, then by name:
--     [%(offset)s, + %(limit)s);
--   rows ('dead', ...) and ('late', ...): the alerts' slice [%(alert_offset)s, + %(alert_limit)s)
--     (NULL: all) of the jobs with dead batches, then (after %(reaper)s, 1 when the reaper's alert
--     comes between) of the jobs with a late watermark, each by name.
-- Only the returned jobs get their lag (the prefix sums before the watermark: one probe each).
, matched AS (
    -- read four times below, so computed once (PostgreSQL materializes a WITH query read more
    -- than once)
    SELECT h.*, (%(q)s = '' OR strpos(lower(h.name), %(q)s) > 0
                 OR strpos(lower(h.connector_name), %(q)s) > 0)
                AND (%(connector)s = '' OR h.connector_name = %(connector)s) AS matches
    FROM health AS h
),
counted AS (
    SELECT state, count(*) AS n_all, count(*) FILTER (WHERE matches) AS n_match,
           count(*) FILTER (WHERE n_dead > 0) AS n_dead_jobs,
           count(*) FILTER (WHERE late IS NOT NULL) AS n_late_jobs
    FROM matched GROUP BY state
),
picked AS (
    -- each slice sorted by a bounded (top-N) sort, which keeps only the slice's rows: a
    -- row_number() over the same order would sort every job first (at 10,000 jobs a third of the
    -- statement's time); `ord` and the name put the slices' rows in order at the end
    (SELECT 'page' AS part, m.state_rank AS ord, m.*
     FROM matched AS m WHERE matches AND (%(state)s = '' OR state = %(state)s)
     ORDER BY state_rank, name LIMIT %(limit)s OFFSET %(offset)s)
    UNION ALL
    (SELECT 'dead', 0, m.* FROM matched AS m WHERE n_dead > 0
     ORDER BY name LIMIT %(alert_limit)s OFFSET %(alert_offset)s)
    UNION ALL
    (SELECT 'late', 0, m.* FROM matched AS m
     WHERE late IS NOT NULL ORDER BY name LIMIT %(alert_limit)s
     OFFSET greatest(%(alert_offset)s - %(reaper)s
                     - (SELECT coalesce(sum(n_dead_jobs), 0) FROM counted), 0))
)
SELECT 'count' AS part, NULL::bigint AS ord, state, n_all, n_match, n_dead_jobs, n_late_jobs,
       NULL AS id, NULL AS name, NULL AS paused, NULL AS schedule_seconds,
       NULL AS lease_seconds, NULL AS watermark_type, NULL AS connector_name,
       NULL AS connector_state, NULL AS connector_kind, NULL AS connector_config,
       NULL AS wm_type, NULL AS wm_value, NULL AS wm_position,
       NULL AS wm_updated_at, NULL AS n_queued, NULL AS n_running,
       NULL AS n_failed, NULL AS n_dead, NULL AS lag_items,
       NULL AS lag_weight, NULL AS late, NULL AS row_state
FROM counted
UNION ALL
SELECT p.part, p.ord, NULL, NULL, NULL, NULL, NULL,
       p.id, p.name, p.paused, p.schedule_seconds, p.lease_seconds, jx.watermark_type,
       p.connector_name, p.connector_state, cx.kind, cx.config, wx.type,
       wx.value, p.wm_position, p.wm_updated_at, p.n_queued, p.n_running, p.n_failed, p.n_dead,
       CASE WHEN p.outside THEN p.ext_items ELSE lag.items END,
       CASE WHEN p.outside THEN p.ext_weight ELSE lag.weight END,
       p.late, p.state
FROM picked AS p
-- the other columns of the rows returned, by primary key
JOIN inventory_job AS jx ON jx.id = p.id
JOIN inventory_connector AS cx ON cx.id = p.connector_id
JOIN inventory_watermark AS wx ON wx.job_id = p.id
-- the lag of a job behind (two probes); (0, 0) without a probe for the others
CROSS JOIN LATERAL tidemark_lag(
    CASE WHEN p.behind AND NOT p.outside THEN p.connector_id END, p.wm_position
) AS lag
ORDER BY part, ord, name;

-- name: health_all
-- Every job's row, by name, with its lag and the dead batch its watermark waits for, if any
-- (the graph page; /metrics reads health_metrics, leaner still): the uncommitted
-- incremental batch starting at the watermark (batch_job_lower_idx, as in queries.sql:
-- jobs_blockers), looked for in the jobs with dead batches only. The lag is the sums at the
-- connector's last asset, read once per connector (tips), minus those below the watermark, kept
-- on its row (wm_done_count, wm_done_weight): no probe of the assets per job.
-- No connector config (the rows carry no weight unit), and a watermark's value only where the
-- time lag reads it (datetime watermarks): jsonb is the costly part of a row to hand over.
-- Last, the job's open batches by kind and status (/metrics' tidemark_batches), counted in the
-- same pass over the open batches as the state's counts (job_health: open_batches): one array
-- per job in the order of selectors_health.OPEN_BY_KIND, NULL when the job has none.
SELECT h.id, h.name, h.paused, h.schedule_seconds, h.lease_seconds, jx.watermark_type,
       h.connector_name, h.connector_state, NULL, NULL, wx.type,
       CASE WHEN jx.watermark_type = 'datetime' THEN wx.value END,
       h.wm_position, h.wm_updated_at, h.n_queued, h.n_running, h.n_failed, h.n_dead,
       CASE WHEN h.outside THEN h.ext_items
            WHEN h.behind THEN h.tip_count - h.wm_done_count ELSE 0 END,
       CASE WHEN h.outside THEN h.ext_weight
            WHEN h.behind THEN h.tip_weight - h.wm_done_weight ELSE 0 END,
       h.late, h.state, held.id, h.open_by_kind
FROM health AS h
-- the other columns of the rows returned, by primary key
JOIN inventory_job AS jx ON jx.id = h.id
JOIN inventory_watermark AS wx ON wx.job_id = h.id
LEFT JOIN LATERAL (
    SELECT b.id FROM inventory_batch AS b
    WHERE h.n_dead > 0 AND b.job_id = h.id AND lower(b.span) = h.wm_position
      AND b.backfill_id IS NULL AND b.status = 'dead'
    LIMIT 1
) AS held ON true
ORDER BY h.name;

-- name: health_of
-- The state and lag of the jobs %(ids)s (the API's job list shows them beside each job): the
-- rows of `health`, which reads those ids only (job_health's facts: the condition written once,
-- as the planner takes two copies of it for two filters and plans for one job), with the lag as
-- health_all reads it (the sums below the watermark kept on its row: no probe per job).
SELECT h.id, h.state,
       CASE WHEN h.outside THEN h.ext_items
            WHEN h.behind THEN h.tip_count - h.wm_done_count ELSE 0 END,
       CASE WHEN h.outside THEN h.ext_weight
            WHEN h.behind THEN h.tip_weight - h.wm_done_weight ELSE 0 END
FROM health AS h;

-- name: waiting_connectors
-- A slice of the connectors waiting on another, by name, each with whether its start_after
-- still names another connector or label (one stored before names were checked may not).
SELECT c.name, c.start_after,
       EXISTS (SELECT 1 FROM inventory_connector AS o
               WHERE o.id <> c.id
                 AND (o.name = c.start_after OR o.labels @> jsonb_build_array(c.start_after)))
FROM inventory_connector AS c WHERE c.state = 'waiting'
ORDER BY c.name LIMIT %(limit)s OFFSET %(offset)s;

-- name: waiting_connectors_count
SELECT count(*) FROM inventory_connector WHERE state = 'waiting';

-- name: health_metrics
-- /metrics, at every scrape: one row per job, by name, with no more than its families write
-- (inventory/api/metrics.py): the state, the failed and dead batches, whether the watermark is
-- late, the lag (the sums at the connector's last asset, read once per connector in `tips`,
-- minus those below the watermark, kept on its row: one pass over the jobs, no probe of the
-- assets per job), a datetime
-- watermark's value (the time lag), and when the watermark last moved as epoch seconds (a float
-- is cheaper to hand over than a timestamp). The columns only TIDEMARK_METRICS_PER_JOB=full
-- writes (%(full)s) are NULL otherwise, and their reads skipped: the position, whether the
-- watermark waits for a dead batch (the uncommitted incremental batch starting at the watermark,
-- batch_job_lower_idx, looked for in the jobs with dead batches only) and the job's open batches
-- by kind and status (an array in the order of selectors_health.OPEN_BY_KIND, NULL: none).
-- First, a row with no name: the open batches of all jobs by kind and status in the same order,
-- summed from job_health's counts per job (open_batches, read once: a WITH query read twice is
-- computed once), not from a second pass over the batches.
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       ARRAY[sum(by_kind[1]), sum(by_kind[2]), sum(by_kind[3]), sum(by_kind[4]),
             sum(by_kind[5]), sum(by_kind[6]), sum(by_kind[7]), sum(by_kind[8])]::bigint[]
FROM open_batches
UNION ALL
SELECT * FROM (
    SELECT h.name, h.state, h.n_failed, h.n_dead, h.late IS NOT NULL,
           CASE WHEN h.outside THEN h.ext_items
                WHEN h.behind THEN h.tip_count - h.wm_done_count ELSE 0 END,
           CASE WHEN NOT %(full)s THEN NULL WHEN h.outside THEN h.ext_weight
                WHEN h.behind THEN h.tip_weight - h.wm_done_weight ELSE 0 END,
           h.wm_datetime, extract(epoch FROM h.wm_updated_at)::float8,
           CASE WHEN %(full)s THEN h.wm_position END,
           held.id IS NOT NULL,
           CASE WHEN %(full)s THEN h.open_by_kind END
    FROM health AS h
    LEFT JOIN LATERAL (
        SELECT b.id FROM inventory_batch AS b
        WHERE %(full)s AND h.n_dead > 0 AND b.job_id = h.id AND lower(b.span) = h.wm_position
          AND b.backfill_id IS NULL AND b.status = 'dead'
        LIMIT 1
    ) AS held ON true
    ORDER BY h.name
) AS jobs;

-- bench_dashboard.py's data, bulk-loaded into a database of its own by dashboard_data.load: the
-- statements (separated by a blank line after their `;`) run in order with the named parameters
-- of dashboard_shape.py (psycopg2 placeholders; a literal percent sign is doubled).

SET maintenance_work_mem = '512MB';

-- the shape: job j reads connector j / per_connector (%(per_connector)s jobs per connector); the
-- lag class is the connector's (every tenth LAG_LONG, every 250th LAG_HUGE, the others LAG_ITEMS),
-- or the job's when all jobs read one connector, the k-th job of a connector (k mod 100) 1%% more
-- behind than the (k-1)-th; job 0 covers per_job batches of
-- BIG items, the others per_job batches of 1 item. A connector has as many assets as its longest
-- job covers plus lags; each job's batches end where its own lag starts.
CREATE TABLE bench_shape AS
SELECT j, j / %(per_connector)s AS c, (CASE WHEN j = 0 THEN %(big)s ELSE 1 END) AS per_batch,
       (CASE WHEN j = 0 THEN %(big)s ELSE 1 END) * %(per_job)s AS span,
       (CASE WHEN mod(k, 250) = 3 THEN %(huge)s
             WHEN mod(k, 10) = 3 THEN %(long)s ELSE %(lag)s END)::bigint
           * (100 + mod(j, least(%(per_connector)s, 100))) / 100 AS lag
FROM generate_series(0, %(jobs)s - 1) AS j
CROSS JOIN LATERAL (SELECT CASE WHEN %(per_connector)s >= %(jobs)s THEN j
                                ELSE j / %(per_connector)s END AS k) AS class;

CREATE TABLE bench_connector_size AS
SELECT c, max(span + lag) AS size FROM bench_shape GROUP BY c;

INSERT INTO inventory_connector (name, kind, labels, config, cursor, state, start_after, created_at,
    updated_at)
SELECT 'src-' || c, 'files', '[]', '{}', '{}', CASE WHEN mod(c, 250) = 7 THEN 'waiting' ELSE 'active' END,
       CASE WHEN mod(c, 250) = 7 THEN 'src-1' ELSE '' END, now(), now()
FROM bench_connector_size ORDER BY c;

-- assets: bench_connector_size.size per connector, with their
-- prefix sums (what assets_register writes) in closed form: weight 100 + mod(n, 50)
ALTER TABLE inventory_asset DISABLE TRIGGER tidemark_asset_prefix_insert;

-- no watermark yet (they are inserted below, each taking its sums then)
ALTER TABLE inventory_asset DISABLE TRIGGER tidemark_asset_watermarks_insert;

-- loaded without its secondary indexes and foreign key, which are built once afterwards
DO $$
DECLARE fk text;
BEGIN
    SELECT conname INTO fk FROM pg_constraint
    WHERE conrelid = 'inventory_asset'::regclass AND contype = 'f';
    EXECUTE 'ALTER TABLE inventory_asset DROP CONSTRAINT ' || quote_ident(fk);
END $$;

ALTER TABLE inventory_asset DROP CONSTRAINT asset_connector_location_unique;

DROP INDEX asset_connector_id_idx;

INSERT INTO inventory_asset (connector_id, location, weight, discovered_at, extra, cum_count,
    cum_weight)
SELECT c.id, 's3://bench/' || c.name || '/' || n, 100 + mod(n, 50), now(), '{}', n + 1,
       100 * (n + 1) + 1225 * ((n + 1) / 50) + mod(n + 1, 50) * (mod(n + 1, 50) - 1) / 2
FROM inventory_connector AS c
JOIN bench_connector_size AS s ON s.c = substr(c.name, 5)::int
CROSS JOIN LATERAL generate_series(0, s.size - 1) AS n
ORDER BY c.id, n;

ALTER TABLE inventory_asset ENABLE TRIGGER tidemark_asset_prefix_insert;

ALTER TABLE inventory_asset ENABLE TRIGGER tidemark_asset_watermarks_insert;

CREATE INDEX asset_connector_id_idx ON inventory_asset (connector_id, id);

ALTER TABLE inventory_asset ADD CONSTRAINT asset_connector_location_unique
    UNIQUE (connector_id, location);

ALTER TABLE inventory_asset ADD CONSTRAINT asset_connector_fk FOREIGN KEY (connector_id)
    REFERENCES inventory_connector (id) DEFERRABLE INITIALLY DEFERRED;

INSERT INTO inventory_job (name, connector_id, processor, params, sink, watermark_type, batch_weight,
    max_items, max_attempts, retry_backoff_seconds, lease_seconds, schedule_seconds, schedule_cron,
    max_concurrency, executor, start_position, lookback, paused, created_at, updated_at,
    restatements)
SELECT 'job-' || s.j, c.id, 'passthrough', '{}', '{}', 'int', 1000000, 1000, 3, 30, 120,
       300, '', 2, 'warm', 0, 0, false, now(), now(), 'automatic'
FROM bench_shape AS s JOIN inventory_connector AS c ON c.name = 'src-' || s.c ORDER BY s.j;

CREATE TEMP TABLE job_items AS
SELECT j.id AS job_id, j.connector_id, first.id + n.size - s.span - s.lag AS first_id, s.per_batch
FROM bench_shape AS s
JOIN inventory_job AS j ON j.name = 'job-' || s.j
JOIN bench_connector_size AS n ON n.c = s.c
CROSS JOIN LATERAL (SELECT min(a.id) AS id FROM inventory_asset AS a
                    WHERE a.connector_id = j.connector_id) AS first;

-- the batch tables are loaded without their secondary indexes and constraints (among them the
-- GiST exclusion constraint of overlapping batches, checked row by row), built once afterwards
-- from their definitions, kept here
CREATE TABLE bench_deferred AS
SELECT 1 AS step, format('ALTER TABLE %%s ADD CONSTRAINT %%I %%s', conrelid::regclass, conname,
                         pg_get_constraintdef(oid)) AS ddl,
       format('ALTER TABLE %%s DROP CONSTRAINT %%I', conrelid::regclass, conname) AS undo
FROM pg_constraint
WHERE conrelid IN ('inventory_batch'::regclass, 'inventory_batchattempt'::regclass,
                   'inventory_watermarkevent'::regclass)
  AND contype IN ('u', 'x', 'f')
UNION ALL
SELECT 0, pg_get_indexdef(i.indexrelid), format('DROP INDEX %%s', i.indexrelid::regclass)
FROM pg_index AS i
WHERE i.indrelid IN ('inventory_batch'::regclass, 'inventory_batchattempt'::regclass,
                     'inventory_watermarkevent'::regclass)
  AND NOT i.indisprimary
  AND NOT EXISTS (SELECT FROM pg_constraint AS c
                  WHERE c.conindid = i.indexrelid AND c.contype IN ('u', 'x', 'p'));

DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT undo FROM bench_deferred ORDER BY step DESC LOOP
        EXECUTE r.undo;
    END LOOP;
END $$;

-- batches: b = 0 .. per_job-1, mostly succeeded; the last ones of each job: a dead, a failed,
-- a cancelled, two running; finished over the last 30 days, the newest within the last day
INSERT INTO inventory_batch (job_id, kind, status, span, item_count, weight, attempt, max_attempts,
    lease_expires_at, worker, next_attempt_at, created_at, started_at, finished_at, result,
    watermark_value, error, skip_reason, config_snapshot)
SELECT ji.job_id, 'incremental',
       CASE b WHEN %(per_job)s - 5 THEN 'dead' WHEN %(per_job)s - 4 THEN 'failed'
              WHEN %(per_job)s - 3 THEN 'cancelled' WHEN %(per_job)s - 2 THEN 'running'
              WHEN %(per_job)s - 1 THEN 'running' ELSE 'succeeded' END,
       int8range(ji.first_id + b * ji.per_batch, ji.first_id + (b + 1) * ji.per_batch),
       ji.per_batch, ji.per_batch * 120, 1, 3,
       CASE WHEN b >= %(per_job)s - 2 THEN now() + interval '10 minutes' END,
       'bench-worker', CASE WHEN b = %(per_job)s - 4 THEN now() + interval '1 minute' END,
       now() - make_interval(mins => (%(per_job)s - b) * 43),
       now() - make_interval(mins => (%(per_job)s - b) * 43),
       CASE WHEN b < %(per_job)s - 2 THEN now() - make_interval(mins => (%(per_job)s - b) * 43 - 1) END,
       '{"rows_in": 1000, "rows_out": 1000}', NULL,
       CASE WHEN b IN (%(per_job)s - 5, %(per_job)s - 4)
            THEN '{"type": "AnalysisException", "message": "bad file"}'::jsonb ELSE '{}'::jsonb END,
       '', '{}'
FROM job_items AS ji CROSS JOIN generate_series(0, %(per_job)s - 1) AS b;

-- attempts, and the hourly rates rollup their trigger keeps, counted once (as migration 0027 does)
ALTER TABLE inventory_batchattempt DISABLE TRIGGER tidemark_rates_count_insert;

INSERT INTO inventory_batchattempt (batch_id, number, worker, started_at, finished_at, outcome, error)
SELECT id, 1, worker, started_at, finished_at,
       CASE WHEN status IN ('succeeded') THEN 'succeeded' WHEN status IN ('dead', 'failed') THEN 'failed'
            ELSE '' END, error
FROM inventory_batch ORDER BY id;

ALTER TABLE inventory_batchattempt ENABLE TRIGGER tidemark_rates_count_insert;

INSERT INTO inventory_jobhourlyrates (job_id, hour, succeeded, failed, items, weight)
SELECT b.job_id, date_trunc('hour', a.finished_at, 'UTC'),
       count(*) FILTER (WHERE a.outcome = 'succeeded'),
       count(*) FILTER (WHERE a.outcome <> 'succeeded'),
       coalesce(sum(b.item_count) FILTER (WHERE a.outcome = 'succeeded'), 0),
       coalesce(sum(b.weight) FILTER (WHERE a.outcome = 'succeeded'), 0)
FROM inventory_batchattempt AS a JOIN inventory_batch AS b ON b.id = a.batch_id
WHERE a.outcome <> '' AND a.finished_at >= statement_timestamp() - interval '2 days'
GROUP BY 1, 2;

INSERT INTO inventory_watermark (job_id, type, position, value, updated_at)
SELECT ji.job_id, 'int', ji.first_id + (%(per_job)s - 5) * ji.per_batch,
       to_jsonb(ji.first_id + (%(per_job)s - 5) * ji.per_batch - 1), now() - interval '4 hours'
FROM job_items AS ji;

INSERT INTO inventory_watermarkevent (watermark_id, old_position, new_position, old_value, new_value,
    source, batch_id, actor, reason, is_replay, created_at)
SELECT w.id, lower(b.span), upper(b.span), to_jsonb(lower(b.span) - 1), to_jsonb(upper(b.span) - 1),
       'batch', b.id, '', '', false, b.finished_at
FROM inventory_batch AS b JOIN inventory_watermark AS w ON w.job_id = b.job_id
WHERE b.status = 'succeeded' ORDER BY b.id;

-- the batch tables' indexes, then their constraints
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT ddl FROM bench_deferred ORDER BY step LOOP
        EXECUTE r.ddl;
    END LOOP;
END $$;

INSERT INTO inventory_maintenancerun (name, last_run_at, outcome)
VALUES ('tidemark:reap-leases', now(), '{}') ON CONFLICT (name) DO NOTHING;

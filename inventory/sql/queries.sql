-- The statements Tidemark's services send, by name (inventory.sql.query). Parameters are
-- named (%(name)s), sent by inventory/sql/gateway.py alone. The functions they call are in schema/.

-- ---- the batch lifecycle (inventory/services/lifecycle.py) -------------------------------------

-- name: batch_acquire
SELECT * FROM tidemark_acquire(
    %(job)s, %(items)s, %(worker)s, %(lease)s, %(snapshot)s::jsonb, %(limit)s
);

-- name: batches_acquire
-- Up to %(count)s batches started for one worker in one call (tidemark_acquire_batches).
SELECT * FROM tidemark_acquire_batches(
    %(job)s, %(items)s, %(worker)s, %(lease)s, %(snapshot)s::jsonb, %(limit)s, %(count)s
);

-- name: batch_plan_next
-- The next incremental batch, queued (tidemark_plan_next; the caller holds the job's row).
SELECT * FROM tidemark_plan_next(%(job)s, %(items)s, '', NULL, %(snapshot)s::jsonb);

-- name: job_blocked
SELECT tidemark_job_blocked(%(job)s);

-- name: batch_transition
-- Every status change of batches (schema/transitions.sql): ids, from-statuses, to-status, and
-- what that move writes besides.
SELECT * FROM tidemark_batch_transition(
    %(ids)s::bigint[], %(from)s::text[], %(to)s, p_worker => %(worker)s,
    p_lease_seconds => %(lease)s, p_error => %(error)s::jsonb, p_skip_reason => %(skip_reason)s,
    p_more_attempts => %(more_attempts)s
);

-- name: batch_insert
-- New batches of a job (of a backfill when given) born with a status (schema/transitions.sql).
SELECT * FROM tidemark_batch_insert(
    %(job)s, %(backfill)s, %(status)s, %(lowers)s::bigint[], %(uppers)s::bigint[],
    %(counts)s::bigint[], %(weights)s::bigint[], %(snapshot)s::jsonb,
    p_skip_reason => %(skip_reason)s
);

-- name: backfill_transition
SELECT id FROM tidemark_backfill_transition(%(backfill)s, %(from)s::text[], %(to)s);

-- name: job_lock_for_start
-- Shared: a pause waits for a start in progress, and a start after the pause sees it.
SELECT 1 FROM inventory_job WHERE id = %(job)s FOR SHARE;

-- name: batch_heartbeat
-- Extends, never shortens: a lease taken for longer than the job's (acquire's lease_seconds) is
-- not cut down to the job's by a heartbeat that names no length.
UPDATE inventory_batch AS b
SET lease_expires_at = greatest(
    b.lease_expires_at,
    statement_timestamp() + make_interval(secs => coalesce(%(lease)s, j.lease_seconds))
)
FROM inventory_job AS j
WHERE b.id = %(batch)s AND j.id = b.job_id AND b.status = 'running' AND b.attempt = %(attempt)s
  AND b.lease_expires_at > statement_timestamp()
RETURNING b.lease_expires_at;

-- name: batch_succeed
SELECT * FROM tidemark_succeed(%(batch)s, %(attempt)s, %(result)s::jsonb, %(watermark)s::jsonb);

-- name: batches_succeed
-- Several batches of one job committed in one call (tidemark_succeed_batches): the rows of those
-- that committed.
SELECT * FROM tidemark_succeed_batches(
    %(batches)s::bigint[], %(attempts)s::integer[], %(results)s::jsonb[], %(values)s::jsonb[]
);

-- name: backfill_complete_if_done
SELECT tidemark_complete_backfill(%(backfill)s);

-- ---- watermarks (inventory/services/watermarks.py) ---------------------------------------------

-- name: watermark_merge
SELECT tidemark_merge_watermark(%(type)s, %(old)s::jsonb, %(new)s::jsonb);

-- name: watermark_advance
SELECT tidemark_advance(%(watermark)s, %(batch)s, %(actor)s, %(reason)s);

-- name: watermark_value_at
-- The value a job's committed batches below a position give its watermark (no row: none).
SELECT value FROM tidemark_watermark_boundaries(%(job)s) WHERE boundary <= %(position)s
ORDER BY boundary DESC LIMIT 1;

-- name: watermark_position_of_value
-- The last committed boundary at which the watermark has the given value (a datetime: the same
-- instant), with the nearest boundaries below and above it when none has it exactly.
WITH b AS (
    SELECT boundary, value,
           CASE WHEN %(type)s = 'datetime'
                THEN (value #>> '{}')::timestamptz - (%(value)s::jsonb #>> '{}')::timestamptz
           END AS delta,
           value = %(value)s::jsonb
           OR (%(type)s = 'datetime'
               AND (value #>> '{}')::timestamptz = (%(value)s::jsonb #>> '{}')::timestamptz)
           AS equal
    FROM tidemark_watermark_boundaries(%(job)s)
)
SELECT
    (SELECT max(boundary) FROM b WHERE equal) AS exact,
    (SELECT boundary FROM b WHERE delta < interval '0' ORDER BY delta DESC, boundary DESC LIMIT 1)
        AS below,
    (SELECT value FROM b WHERE delta < interval '0' ORDER BY delta DESC, boundary DESC LIMIT 1)
        AS below_value,
    (SELECT boundary FROM b WHERE delta > interval '0' ORDER BY delta, boundary LIMIT 1) AS above,
    (SELECT value FROM b WHERE delta > interval '0' ORDER BY delta, boundary LIMIT 1) AS above_value;

-- name: watermark_record
-- An operator's correction: the event and the new watermark in one statement.
WITH event AS (
    INSERT INTO inventory_watermarkevent (
        watermark_id, old_position, new_position, old_value, new_value, source,
        batch_id, actor, reason, is_replay, created_at
    ) VALUES (%(id)s, %(old_position)s, %(new_position)s, %(old_value)s::jsonb,
              %(new_value)s::jsonb, %(source)s, %(batch)s, %(actor)s, %(reason)s,
              %(replay)s, statement_timestamp())
)
UPDATE inventory_watermark
SET position = %(new_position)s, value = %(new_value)s::jsonb, updated_at = statement_timestamp()
WHERE id = %(id)s;

-- ---- planning (inventory/services/planning.py) -------------------------------------------------

-- name: plan_batches
-- (the connector whose assets are the items, or NULL; the item query; first id; end; budget; cap;
-- at most this many batches, NULL: all)
SELECT lower, upper, item_count, weight FROM tidemark_plan_items(
    %(connector)s, %(items)s, %(first)s, %(end)s, %(budget)s, %(max_items)s, %(limit)s
);

-- name: incremental_next
SELECT lo, hi FROM tidemark_incremental_next(%(job)s, %(items)s);

-- ---- assets (inventory/services/assets.py) -----------------------------------------------------

-- name: assets_register
-- (connector, locations, weights, extras as JSON text): takes the connector's row lock, held until
-- the caller commits, and inserts the new locations (registration.sql); the added rows, in id order.
SELECT previous_id, id, location, discovered_at
FROM tidemark_assets_register(
    %(connector)s, %(locations)s::text[], %(weights)s::bigint[], %(extras)s::text[]
);

-- name: assets_known_size
-- Discovery's check that its copy of the registered locations is current: the connector's last
-- asset, its id and its running count (Asset.cum_count, kept true by the prefix-sum triggers
-- through any insert or delete), one index lookup on asset_connector_id_idx however many assets
-- the connector has (a count(*) read them all). No row: no asset.
-- The third column folds in the check for changed files to restate (restatements.changed_unrestated):
-- whether any of the connector's assets is flagged as changed after registration and not yet
-- restated, one probe of the partial index asset_changed_unrestated_idx (its condition, written
-- the same, so the planner uses it); a look whose answer is false sends no statement for it.
SELECT last.cum_count, last.id, EXISTS (
    SELECT FROM inventory_asset AS a
    WHERE a.connector_id = %(connector)s
      AND a.extra ? 'changed_after_registration' AND NOT a.extra ? 'restated'
) AS changed
FROM tidemark_asset_before(%(connector)s, NULL) AS last;

-- name: assets_count
-- The connector's asset count the slow way: only when its last asset's cum_count is missing.
SELECT count(*) FROM inventory_asset WHERE connector_id = %(connector)s;

-- name: assets_known_since
-- The assets of a connector with ids above the first id (the highest discovery has seen) and up
-- to the second (the last asset it just looked up): ids follow visibility order, so none can
-- appear below it later. Their location, and for those registered within the recheck window
-- (seconds) and not flagged yet, what discovery's recheck compares (NULLs for the others, so a
-- process's first look at a connector of old files reads little more than the locations).
SELECT location, recent.*
FROM inventory_asset AS a
LEFT JOIN LATERAL (
    SELECT a.id, a.weight, (a.extra ->> 'mtime_ns')::bigint,
           extract(epoch FROM a.discovered_at)::float8
    WHERE a.discovered_at > now() - make_interval(secs => %(recheck_seconds)s)
      AND a.extra ->> 'mtime_ns' IS NOT NULL AND NOT a.extra ? 'changed_after_registration'
) AS recent ON true
WHERE a.connector_id = %(connector)s AND a.id > %(after)s AND a.id <= %(upto)s
ORDER BY a.id;

-- name: asset_flag_changed
-- Once: a row already flagged is left as it is (the row count says whether this call flagged it).
UPDATE inventory_asset
SET extra = extra || jsonb_build_object('changed_after_registration', %(change)s::jsonb)
WHERE id = %(id)s AND NOT extra ? 'changed_after_registration';

-- name: asset_slices_between
-- The first and last id of a table connector's slices whose [lower, upper) meets the closed
-- range [%(first)s, %(last)s] of column values (a backfill given by time or value). {type} is the
-- column's SQL type (int8, timestamptz, timestamp), chosen in Python from a fixed list. One pass
-- over the connector's slices along asset_connector_id_idx, in the database: a slice's bounds are
-- in its JSON, so no index orders them.
SELECT min(id), max(id) FROM inventory_asset
WHERE connector_id = %(connector)s
  AND (extra ->> 'upper')::{type} > %(first)s
  AND (extra ->> 'lower')::{type} <= %(last)s;

-- name: urgent_backfill_admissible
-- the job's urgent backfill (priority > 0) that may start a batch now: job_run holds new
-- incremental planning back for it, by the rule acquire claims by
SELECT f.id FROM inventory_backfill AS f
WHERE f.job_id = %(job)s AND f.status = 'running' AND f.priority > 0
  AND EXISTS (SELECT 1 FROM tidemark_backfill_admissible(f.id))
ORDER BY f.priority DESC, f.id
LIMIT 1;

-- ---- reads (inventory/selectors*.py) ---------------------------------------------------------

-- name: jobs_lag
-- (job, items, weight) at or after the watermark of each given job that reads Tidemark's asset
-- table: the prefix sums at the connector's last asset minus those at the last asset before the
-- watermark. Two probes of asset_connector_id_idx per job, whatever the backlog. Jobs reading a
-- local meta table in place or another job's commits are left out (selectors.job_lag counts them).
SELECT j.id, lag.items, lag.weight
FROM inventory_job AS j
JOIN inventory_watermark AS w ON w.job_id = j.id
JOIN inventory_connector AS c ON c.id = j.connector_id
CROSS JOIN LATERAL tidemark_lag(j.connector_id, w.position) AS lag
WHERE j.id = ANY(%(ids)s) AND NOT tidemark_lag_outside(c.kind, c.config);

-- name: jobs_blockers
-- (job, batch, status) of the batch each job's watermark waits for (selectors.job_blocker), of the
-- jobs in %(ids)s, or of every job when it is NULL: the uncommitted incremental batch starting at
-- the watermark (batch_job_lower_idx), else the cancelled incremental batch whose range holds it
-- (batch_job_status_idx). Jobs whose watermark waits for nothing are left out.
SELECT j.id, coalesce(held.id, cancelled.id), coalesce(held.status, 'cancelled')
FROM inventory_job AS j JOIN inventory_watermark AS w ON w.job_id = j.id
LEFT JOIN LATERAL (
    SELECT b.id, b.status FROM inventory_batch AS b
    WHERE b.job_id = j.id AND b.backfill_id IS NULL AND lower(b.span) = w.position
      AND b.status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'skipped')
    LIMIT 1
) AS held ON true
LEFT JOIN LATERAL (
    SELECT b.id FROM inventory_batch AS b
    WHERE held.id IS NULL AND b.job_id = j.id AND b.status = 'cancelled'
      AND b.backfill_id IS NULL AND b.span @> w.position
    ORDER BY b.id DESC LIMIT 1
) AS cancelled ON true
WHERE (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
  AND ((held.id IS NOT NULL AND held.status NOT IN ('succeeded', 'skipped'))
       OR cancelled.id IS NOT NULL);

-- name: asset_counts_between
-- (lower, assets of the connector with lower <= id < upper) for each given [lower, upper): the
-- prefix sums below upper minus those below lower, two probes of asset_connector_id_idx each.
SELECT g.lo, coalesce(hi.cum_count, 0) - coalesce(lo.cum_count, 0)
FROM unnest(%(lows)s::bigint[], %(highs)s::bigint[]) AS g(lo, hi)
LEFT JOIN tidemark_asset_before(%(connector)s, g.lo) AS lo ON true
LEFT JOIN tidemark_asset_before(%(connector)s, g.hi) AS hi ON true;

-- ---- restatements (inventory/services/restatements.py) -----------------------------------------

-- name: restatement_replaced_commits
-- The commits whose output the given batch replaced, per connector reading its job's commits (none when
-- it replaced nothing or no job_output connector reads that job), and the job's last commit: the
-- downstream rebuild reads through it, so it carries the replacing commits committed by then.
SELECT c.id, j.name, array_agg(b.commit_seq ORDER BY b.commit_seq),
       (SELECT max(l.commit_seq) FROM inventory_batch AS l WHERE l.job_id = j.id)
FROM inventory_batch AS b
JOIN inventory_job AS j ON j.id = b.job_id
JOIN inventory_connector AS c ON c.kind = 'job_output' AND c.config ->> 'job' = j.name
WHERE b.replaced_by_id = %(batch)s AND b.commit_seq IS NOT NULL
GROUP BY c.id, j.id, j.name
ORDER BY c.id;

-- name: restatement_slice_counts
-- Late rows restated: each recounted table slice (asset id) takes its row count now as its weight.
UPDATE inventory_asset AS a SET weight = c.rows
FROM unnest(%(ids)s::bigint[], %(rows)s::bigint[]) AS c(id, rows)
WHERE a.id = c.id;

-- name: restatement_files_restated
-- Changed files restated: the backfills that read them again, recorded on each asset at once.
UPDATE inventory_asset SET extra = extra || jsonb_build_object('restated', %(backfills)s::jsonb)
WHERE id = ANY(%(ids)s);

-- name: objects_recent
-- The objects of a connector registered within the recheck window (seconds), with what was seen
-- of them then; the `(connector, id)` index bounds it by what is recent.
SELECT id, location, weight, extra
FROM inventory_asset
WHERE connector_id = %(connector)s AND discovered_at > now() - make_interval(secs => %(recheck_seconds)s)
ORDER BY id;

-- name: object_flag_changed
-- An object rewritten under its key: what it is now, and the change to restate (again after a
-- restatement: `restated` leaves). Only if it still holds the ETag the caller compared with, so
-- two looks at once record one change.
UPDATE inventory_asset
SET weight = %(size)s,
    extra = (extra - 'restated') || jsonb_build_object(
        'etag', %(etag)s::text, 'last_modified', %(last_modified)s::text,
        'mtime_ns', %(mtime_ns)s::bigint, 'changed_after_registration', %(change)s::jsonb)
WHERE id = %(id)s AND weight = %(old_size)s
  AND coalesce(extra ->> 'etag', '') = %(old_etag)s;

-- name: step_claim
-- A fixed housekeeping step is about to run: its claim (row `<step>:claimed`) recorded by the
-- database's clock, and refused (no row returned) when the same step was claimed less than
-- %(gap)s seconds ago, as a copy of it that waited in the broker behind busy workers is
-- (services/scheduling.py: fixed_step_run).
INSERT INTO inventory_maintenancerun (name, last_run_at, outcome)
VALUES (%(name)s, now(), '{}'::jsonb)
ON CONFLICT (name) DO UPDATE SET last_run_at = now()
WHERE inventory_maintenancerun.last_run_at <= now() - make_interval(secs => %(gap)s)
RETURNING name;

-- name: job_lock_for_reaper
-- The reaper waits for the job's row as every acquirer does (lock order job -> batch).
SELECT id FROM inventory_job WHERE id = %(job)s FOR UPDATE;

-- name: job_reap_expired
-- The job's running batches whose lease expired become failed attempts (the caller holds the job).
SELECT * FROM tidemark_reap_expired(%(job)s);

-- name: lock_timeout_set
-- How long the rest of the transaction waits for a lock before it fails (SQLSTATE 55P03).
SELECT set_config('lock_timeout', %(timeout)s, true);

-- name: lock_timeout_reset
SET LOCAL lock_timeout TO DEFAULT;

-- ---- the backfill throttle and pacing (inventory/services/throttle.py, dispatch.py) -------------

-- name: backfill_admissible
-- The batches of a backfill that may start now (tidemark_backfill_admissible), in range order.
SELECT tidemark_backfill_admissible(%(backfill)s);

-- name: throttle_usage
-- (connector, weight of its backfill batches started within the throttle's window).
SELECT j.connector_id, coalesce(sum(b.weight), 0) FROM inventory_batch AS b
JOIN inventory_job AS j ON j.id = b.job_id
WHERE b.backfill_id IS NOT NULL
  AND b.started_at >= statement_timestamp() - tidemark_throttle_window()
GROUP BY j.connector_id;

-- name: throttle_admits
-- How many of the weights, in order, the budgets of the job's connector leave room for now.
SELECT tidemark_throttle_admits(connector_id, %(weights)s::bigint[]) FROM inventory_job
WHERE id = %(job)s;

-- name: batch_seconds
-- (job, durations in seconds of its last %(recent)s succeeded batches) for each given job, along
-- batch_job_succeeded_idx.
SELECT j.id, array_agg(r.took) FROM unnest(%(ids)s::bigint[]) AS j(id)
CROSS JOIN LATERAL (
    SELECT extract(epoch FROM b.finished_at - b.started_at) AS took
    FROM inventory_batch b WHERE b.job_id = j.id AND b.status = %(status)s
      AND b.started_at IS NOT NULL AND b.finished_at IS NOT NULL
    ORDER BY b.finished_at DESC LIMIT %(recent)s
) AS r GROUP BY j.id;

-- ---- what an item source may read (inventory/sources/identity.py) -----------------------------

-- name: relation_resolve
-- The relation named by %(relation)s as PostgreSQL resolves it, and everything a read of it can
-- reach: its rules (a view's query, at any depth), row security policies, indexes, column types
-- and domains' CHECK constraints, and whatever those name in pg_depend (relations, functions,
-- operators and the functions behind them, casts, aggregates and their support functions). A
-- reached relation that is Tidemark's own, lies in Tidemark's schema with a Tidemark prefix or in
-- a system schema refuses the source, as does any function that is not built in (an extension's
-- only when SECURITY DEFINER): such a function may read anything, and planning runs the source's
-- query as Tidemark's own role.
WITH RECURSIVE target AS (
    SELECT to_regclass(%(relation)s) AS oid
), own AS (
    SELECT to_regclass(quote_ident(name)) AS oid FROM unnest(%(own)s::text[]) AS name
), own_schemas AS (
    SELECT DISTINCT c.relnamespace AS nsp FROM pg_class c JOIN own ON c.oid = own.oid
), reach(classid, objid) AS (
    SELECT 'pg_class'::regclass::oid, oid FROM target WHERE oid IS NOT NULL
    UNION
    SELECT step.classid, step.objid FROM reach
    CROSS JOIN LATERAL (
        SELECT d.refclassid AS classid, d.refobjid AS objid FROM pg_depend d
        WHERE d.classid = reach.classid AND d.objid = reach.objid AND d.deptype <> 'e'
        UNION ALL
        SELECT 'pg_rewrite'::regclass::oid, w.oid FROM pg_rewrite w
        WHERE reach.classid = 'pg_class'::regclass AND w.ev_class = reach.objid
        UNION ALL
        SELECT 'pg_policy'::regclass::oid, p.oid FROM pg_policy p
        WHERE reach.classid = 'pg_class'::regclass AND p.polrelid = reach.objid
        UNION ALL
        SELECT 'pg_class'::regclass::oid, i.indexrelid FROM pg_index i
        WHERE reach.classid = 'pg_class'::regclass AND i.indrelid = reach.objid
        UNION ALL
        SELECT 'pg_constraint'::regclass::oid, c.oid FROM pg_constraint c
        WHERE reach.classid = 'pg_type'::regclass AND c.contypid = reach.objid
    ) AS step
), reads AS (
    SELECT objid AS oid FROM reach WHERE classid = 'pg_class'::regclass
)
SELECT n.nspname, c.relname,
       EXISTS (SELECT 1 FROM reads JOIN own ON own.oid = reads.oid) AS reads_own,
       EXISTS (
           SELECT 1 FROM reads JOIN pg_class rc ON rc.oid = reads.oid
           WHERE rc.relnamespace IN (SELECT nsp FROM own_schemas)
             AND rc.relname LIKE ANY (%(prefixes)s::text[])
       ) AS reads_own_prefix,
       EXISTS (
           SELECT 1 FROM reads JOIN pg_class rc ON rc.oid = reads.oid
           JOIN pg_namespace rn ON rn.oid = rc.relnamespace
           WHERE rn.nspname LIKE 'pg\_%%' OR rn.nspname = ANY (%(system)s::text[])
       ) AS reads_system,
       (
           SELECT min(pn.nspname || '.' || p.proname) FROM reach
           JOIN pg_proc p ON reach.classid = 'pg_proc'::regclass AND p.oid = reach.objid
           JOIN pg_namespace pn ON pn.oid = p.pronamespace
           WHERE p.oid >= 16384  -- FirstNormalObjectId: below it, PostgreSQL's own
             AND (p.prosecdef OR NOT EXISTS (
                 SELECT 1 FROM pg_depend e
                 WHERE e.classid = 'pg_proc'::regclass AND e.objid = p.oid AND e.deptype = 'e'
             ))
       ) AS calls_function
FROM target JOIN pg_class c ON c.oid = target.oid JOIN pg_namespace n ON n.oid = c.relnamespace;

-- ---- the dashboard's and /metrics' reads (inventory/selectors*.py) -----------------------------

-- name: open_batch_counts
-- (job, status, batches) of the queued, running, failed and dead batches (the partial index
-- batch_open_status_idx: committed batches are never read).
SELECT job_id, status, count(*) FROM inventory_batch
WHERE status IN ('queued', 'running', 'failed', 'dead') GROUP BY job_id, status;

-- name: coverage_batches
-- (id, status, lower, upper, item_count) of the job's batches meeting [%(lower)s, %(upper)s),
-- superseded ones left out, in range order.
SELECT id, status, lower(span), upper(span), item_count FROM inventory_batch
WHERE job_id = %(job)s AND lower(span) < %(upper)s AND upper(span) > %(lower)s
  AND status <> 'superseded' ORDER BY lower(span), id;

-- name: last_batches
-- (job, id, kind, status, finished_at) of each given job's newest batch (batch_job_recent_idx,
-- one probe per job).
SELECT j.id, b.id, b.kind, b.status, b.finished_at FROM unnest(%(ids)s::bigint[]) AS j(id)
JOIN LATERAL (
    SELECT id, kind, status, finished_at FROM inventory_batch
    WHERE job_id = j.id ORDER BY id DESC LIMIT 1
) AS b ON true;

-- name: hourly_rates
-- (job, hours ago, succeeded, failed, items, weight, part of the current hour gone) of the rollup
-- rows (JobHourlyRates, schema/rates.sql) of the last %(hours)s clock hours, of the jobs in
-- %(ids)s or of every job when it is NULL.
SELECT job_id,
       (extract(epoch FROM date_trunc('hour', statement_timestamp(), 'UTC') - hour) / 3600)::int,
       succeeded, failed, items, weight,
       extract(epoch FROM statement_timestamp() - date_trunc('hour', statement_timestamp(), 'UTC'))
       / 3600
FROM inventory_jobhourlyrates
WHERE (%(ids)s::bigint[] IS NULL OR job_id = ANY(%(ids)s::bigint[]))
  AND hour > date_trunc('hour', statement_timestamp(), 'UTC') - make_interval(hours => %(hours)s);

-- name: stalled_backfills
-- (backfill, open batches, dead batches, nothing finished within %(after)s) of running backfills.
SELECT f.id,
       count(*) FILTER (WHERE b.status IN ('queued', 'running', 'failed')),
       count(*) FILTER (WHERE b.status = 'dead'),
       greatest(max(b.finished_at), f.updated_at) < statement_timestamp() - %(after)s
FROM inventory_backfill AS f JOIN inventory_batch AS b ON b.backfill_id = f.id
WHERE f.status = 'running' GROUP BY f.id;

-- ---- the attempt rollup behind /metrics (inventory/services/metrics_rollup.py) -----------------

-- name: rollup_boundaries
-- The rollup's boundaries as one row (below_id, finished_before); finished_before is NULL for no
-- rollup (none yet, or one written before it existed, whose rows scrapes ignore).
SELECT coalesce((outcome->>'below_id')::bigint, 0) AS below_id,
       (outcome->>'finished_before')::timestamptz AS finished_before
FROM inventory_maintenancerun WHERE name = %(rollup)s;

-- name: rollup_try_lock
-- One roller at a time (until the transaction ends); a scrape that finds it busy only reads.
SELECT pg_try_advisory_xact_lock(%(key)s);

-- name: rollup_clear
DELETE FROM inventory_attemptrollup;

-- name: rollup_next_boundaries
-- Past the attempts inserted more than %(settle)s minutes ago, and that many minutes behind the
-- database's clock.
SELECT coalesce(
           (SELECT max(id) + 1 FROM inventory_batchattempt
            WHERE id >= %(old_id)s
              AND started_at < statement_timestamp() - make_interval(mins => %(settle)s)),
           %(old_id)s),
       statement_timestamp() - make_interval(mins => %(settle)s);

-- name: rollup_add
-- The attempts started in [old_id, new_id) and those finished in [old_time, new_time), added.
INSERT INTO inventory_attemptrollup (job_id, outcome, count)
SELECT b.job_id, counted.outcome, count(*) FROM (
    SELECT batch_id, '' AS outcome FROM inventory_batchattempt
    WHERE id >= %(old_id)s AND id < %(new_id)s
    UNION ALL
    SELECT batch_id, outcome FROM inventory_batchattempt
    WHERE finished_at >= coalesce(%(old_time)s, '-infinity'::timestamptz)
      AND finished_at < %(new_time)s AND outcome <> ''
) AS counted
JOIN inventory_batch AS b ON b.id = counted.batch_id
GROUP BY b.job_id, counted.outcome
ON CONFLICT (job_id, outcome)
DO UPDATE SET count = inventory_attemptrollup.count + excluded.count;

-- name: rollup_record
INSERT INTO inventory_maintenancerun (name, last_run_at, outcome)
VALUES (%(rollup)s, statement_timestamp(),
        jsonb_build_object('below_id', %(new_id)s::bigint,
                           'finished_before', %(new_time)s::timestamptz))
ON CONFLICT (name) DO UPDATE SET last_run_at = excluded.last_run_at, outcome = excluded.outcome;

-- name: attempt_counts_rollup
-- The rollup and its boundaries in one snapshot: the boundaries as a row of their own (job NULL),
-- then the rollup's rows when it is of the current kind. Sent after `WITH boundary AS (...)`, the
-- statement rollup_boundaries (gateway.attempt_counts).
SELECT NULL::bigint, NULL::text, NULL::bigint, m.below_id, m.finished_before
FROM boundary AS m
UNION ALL
SELECT r.job_id, r.outcome, r.count, NULL, NULL FROM inventory_attemptrollup AS r
WHERE EXISTS (SELECT 1 FROM boundary AS m WHERE m.finished_before IS NOT NULL);

-- name: attempt_counts_since
-- (job, outcome, attempts) of the attempts at or after the rollup's boundaries.
SELECT b.job_id, counted.outcome, count(*) FROM (
    SELECT batch_id, '' AS outcome FROM inventory_batchattempt WHERE id >= %(below_id)s
    UNION ALL
    SELECT batch_id, outcome FROM inventory_batchattempt
    WHERE finished_at >= %(finished_before)s::timestamptz AND outcome <> ''
) AS counted JOIN inventory_batch AS b ON b.id = counted.batch_id
GROUP BY b.job_id, counted.outcome;

-- name: attempt_totals_rollup
-- attempt_counts_rollup summed by outcome over all jobs (gateway.attempt_totals): the boundaries as
-- a row of their own (first column true), then a row per outcome. Every rollup row is of a job
-- that exists (its foreign key), so the jobs are not joined.
SELECT true, NULL::text, NULL::bigint, m.below_id, m.finished_before
FROM boundary AS m
UNION ALL
SELECT false, r.outcome, sum(r.count)::bigint, NULL, NULL
FROM inventory_attemptrollup AS r
WHERE EXISTS (SELECT 1 FROM boundary AS m WHERE m.finished_before IS NOT NULL)
GROUP BY r.outcome;

-- name: attempt_totals_since
-- (outcome, attempts) of all jobs' attempts at or after the rollup's boundaries.
SELECT counted.outcome, count(*) FROM (
    SELECT batch_id, '' AS outcome FROM inventory_batchattempt WHERE id >= %(below_id)s
    UNION ALL
    SELECT batch_id, outcome FROM inventory_batchattempt
    WHERE finished_at >= %(finished_before)s::timestamptz AND outcome <> ''
) AS counted
GROUP BY counted.outcome;

-- name: jobs_oldest_waiting
-- (job, age in seconds of its oldest item not committed, whether its connector has assets) of the
-- given jobs: the first asset at or after the watermark, one probe of asset_connector_id_idx per job
-- (selectors_freshness: a seconds freshness target). Age NULL: nothing waits among the assets.
SELECT j.id,
       (SELECT greatest(extract(epoch FROM statement_timestamp() - a.discovered_at), 0)::bigint
        FROM inventory_asset AS a
        WHERE a.connector_id = j.connector_id AND a.id >= w.position
        ORDER BY a.id LIMIT 1),
       EXISTS (SELECT 1 FROM inventory_asset AS a WHERE a.connector_id = j.connector_id)
FROM inventory_job AS j
JOIN inventory_watermark AS w ON w.job_id = j.id
WHERE j.id = ANY(%(jobs)s);

-- name: freshness_step_due
-- Whether the freshness throttle's last step is at least the interval old, by the database's
-- clock (services/freshness.py); no row yet: no answer (the step makes the row).
SELECT stepped_at IS NULL
       OR stepped_at <= statement_timestamp() - make_interval(secs => %(interval_seconds)s)
FROM inventory_freshnessthrottle WHERE id = 1;

-- name: statement_time
-- The database's clock at this statement: the one clock the throttle's interval is measured by.
SELECT statement_timestamp();

-- name: job_lowest_open_batch
-- The lowest item id an open batch of the job still reads (a backfill, a restatement, a retry),
-- NULL when none (services/retention_forecast.py).
SELECT min(lower(span)) FROM inventory_batch
WHERE job_id = %(job)s AND status = ANY(%(statuses)s);

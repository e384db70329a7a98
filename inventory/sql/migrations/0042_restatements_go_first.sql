-- Restatements go first (docs/guarantees.md): a batch whose items restate outputs the job's
-- restatement has not rebuilt yet waits for it, at the fence and in the incremental planner; a
-- restatement batch that carries the restating items covers them in the incremental lane.

CREATE OR REPLACE FUNCTION tidemark_stale_outputs(p_job bigint, p_range int8range)
RETURNS TABLE(item bigint, output bigint) LANGUAGE sql STABLE AS $$
    WITH job AS (
        SELECT j.id, c.id AS connector_id, c.kind, c.config->>'job' AS upstream
        FROM inventory_job AS j JOIN inventory_connector AS c ON c.id = j.connector_id
        WHERE j.id = p_job AND j.restatements = 'automatic'
    ), restating AS (
        SELECT a.id AS item, a.discovered_at AS since, r.restated::bigint AS restated
        FROM job JOIN inventory_asset AS a ON a.connector_id = job.connector_id
        CROSS JOIN LATERAL jsonb_array_elements_text(a.extra -> 'restates') AS r(restated)
        WHERE job.kind = 'delta' AND a.id >= lower(p_range) AND a.id < upper(p_range)
          AND a.extra ? 'restates'
        UNION ALL
        SELECT u.commit_seq, u.finished_at, r.commit_seq
        FROM job JOIN inventory_job AS up ON up.name = job.upstream
        JOIN inventory_batch AS u ON u.job_id = up.id
        JOIN inventory_batch AS r ON r.replaced_by_id = u.id
        WHERE job.kind = 'job_output' AND u.commit_seq >= lower(p_range)
          AND u.commit_seq < upper(p_range) AND r.commit_seq IS NOT NULL
    )
    SELECT DISTINCT s.item, o.id
    FROM restating AS s JOIN inventory_batch AS o ON o.job_id = p_job AND o.span @> s.restated
    WHERE o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
      AND o.status = ANY(tidemark_output_statuses())
      AND NOT p_range @> o.span
      AND o.started_at < s.since
    ORDER BY s.item, o.id
$$;

CREATE OR REPLACE FUNCTION tidemark_publish_begin(p_batch bigint, p_attempt integer)
RETURNS TABLE(batch_id bigint, committed boolean) LANGUAGE plpgsql AS $$
DECLARE
    b inventory_batch%ROWTYPE;
    straddling record;
    stale record;
BEGIN
    PERFORM 1 FROM inventory_watermark AS w JOIN inventory_batch AS x ON x.job_id = w.job_id
    WHERE x.id = p_batch
    FOR UPDATE OF w;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'batch % does not exist', p_batch USING ERRCODE = 'TM404';
    END IF;
    SELECT * INTO b FROM inventory_batch WHERE id = p_batch FOR UPDATE;
    IF b.status <> 'running' OR b.attempt <> p_attempt
       OR b.lease_expires_at IS NULL OR b.lease_expires_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'batch % attempt % may not publish its output: the batch is % on attempt %',
            p_batch, p_attempt, b.status, b.attempt
            USING ERRCODE = 'TM409';
    END IF;
    SELECT s.item, s.output INTO stale FROM tidemark_stale_outputs(b.job_id, b.span) AS s LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'batch % waits to publish: its item % restates items whose output (batch %) the job''s restatement has not rebuilt yet',
            p_batch, stale.item, stale.output
            USING ERRCODE = 'TM425';
    END IF;
    SELECT o.id, o.span INTO straddling FROM inventory_batch AS o
    WHERE o.job_id = b.job_id AND o.id <> b.id
      AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
      AND o.status = ANY(tidemark_output_statuses())
      AND o.span && b.span AND NOT b.span @> o.span
    ORDER BY lower(o.span) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'the committed output of batch % (items %) reaches outside batch % (items %): replacing it would remove rows this batch does not rewrite', straddling.id,
            straddling.span, b.id, b.span
            USING ERRCODE = 'TM422';
    END IF;
    RETURN QUERY
        SELECT o.id, o.status = ANY(tidemark_output_statuses()) FROM inventory_batch AS o
        WHERE o.job_id = b.job_id AND o.id <> b.id
          AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
          AND o.span && b.span
        ORDER BY lower(o.span);
END
$$;

CREATE OR REPLACE FUNCTION tidemark_plan_incremental(
    p_job bigint, p_items_sql text, p_lo bigint, p_hi bigint, p_budget bigint, p_cap integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
DECLARE
    planned record;
    up bigint;
    blocked bigint;
    ext bigint;
    assets_of bigint := tidemark_job_assets(p_job);  -- NULL: items read from p_items_sql
BEGIN
    SELECT * INTO planned
    FROM tidemark_plan_items(assets_of, p_items_sql, p_lo, p_hi, p_budget, p_cap, 1);
    IF planned.lower IS NULL THEN
        RETURN;
    END IF;
    up := planned.upper;
    SELECT min(o.lo) INTO blocked FROM tidemark_open_backfill_starts(p_job, int8range(p_lo, up)) AS o;
    -- an item restating outputs not rebuilt yet waits for the job's restatement (publish.sql)
    SELECT least(blocked, min(s.item)) INTO blocked
    FROM tidemark_stale_outputs(p_job, int8range(p_lo, up)) AS s;
    IF blocked IS NOT NULL THEN
        IF blocked <= p_lo THEN
            RETURN;
        END IF;
        SELECT * INTO planned
        FROM tidemark_plan_items(assets_of, p_items_sql, p_lo, blocked, p_budget, p_cap, 1);
        IF planned.lower IS NULL THEN
            RETURN;
        END IF;
        up := planned.upper;
    END IF;
    LOOP
        SELECT max(upper(o.span)) INTO ext FROM inventory_batch AS o
        WHERE o.job_id = p_job AND o.published_attempt IS NOT NULL AND o.replaced_by_id IS NULL
          AND o.status = ANY(tidemark_output_statuses())
          AND o.span && int8range(p_lo, up) AND upper(o.span) > up;
        EXIT WHEN ext IS NULL OR (p_hi IS NOT NULL AND ext > p_hi);
        EXIT WHEN EXISTS (SELECT 1 FROM tidemark_open_backfill_starts(p_job, int8range(up, ext)));
        up := ext;
    END LOOP;
    lower := p_lo;
    upper := up;
    IF up = planned.upper THEN
        item_count := planned.item_count;
        weight := planned.weight;
    ELSE
        EXECUTE 'SELECT count(*)::integer, coalesce(sum(weight), 0)::bigint FROM ('
                || p_items_sql || ') AS items WHERE uid < $2'
            INTO item_count, weight USING p_lo, up;
    END IF;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE FUNCTION tidemark_cover_ahead(p_watermark bigint, p_batch bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    b inventory_batch%ROWTYPE;
    pos bigint;
    sealed bigint;
BEGIN
    SELECT * INTO b FROM inventory_batch WHERE id = p_batch;
    SELECT position INTO pos FROM inventory_watermark WHERE id = p_watermark;
    IF b.backfill_id IS NULL OR NOT (lower(b.span) < pos AND pos < upper(b.span)) THEN
        RETURN;
    END IF;
    PERFORM 1 FROM inventory_batch AS x
    WHERE x.job_id = b.job_id AND x.backfill_id IS NULL
      AND x.status = ANY(tidemark_holding_statuses())
      AND x.span && int8range(pos, upper(b.span));
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT id INTO sealed FROM tidemark_batch_insert(
        b.job_id, NULL, 'skipped', ARRAY[pos], ARRAY[upper(b.span)], ARRAY[0::bigint],
        ARRAY[0::bigint], '{}',
        p_skip_reason => format('read and published by batch %s, the restatement it belongs to', b.id),
        p_finished => true
    );
    PERFORM tidemark_advance(p_watermark, sealed, 'tidemark', format('covered by batch %s', b.id));
END
$$;

CREATE OR REPLACE FUNCTION tidemark_succeed(
    p_batch bigint, p_attempt integer, p_result jsonb, p_value jsonb
) RETURNS SETOF inventory_batch LANGUAGE plpgsql AS $$
DECLARE
    watermark_id bigint;
    v_backfill bigint;
    done inventory_batch%ROWTYPE;
BEGIN
    SELECT w.id, b.backfill_id INTO watermark_id, v_backfill
    FROM inventory_watermark AS w JOIN inventory_batch AS b ON b.job_id = w.job_id
    WHERE b.id = p_batch
    FOR UPDATE OF w;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'batch % does not exist', p_batch USING ERRCODE = 'TM404';
    END IF;
    IF v_backfill IS NOT NULL THEN
        PERFORM 1 FROM inventory_backfill WHERE id = v_backfill FOR UPDATE;
    END IF;
    SELECT * INTO done FROM tidemark_batch_transition(
        ARRAY[p_batch], ARRAY['running'], 'succeeded',
        p_attempt => p_attempt, p_result => p_result, p_value => p_value
    );
    IF done.id IS NULL THEN
        RETURN;  -- fenced out: the caller reports why
    END IF;
    IF done.backfill_id IS NULL THEN
        PERFORM tidemark_advance(watermark_id, done.id, done.worker, '');
    ELSE
        PERFORM tidemark_complete_backfill(done.backfill_id);
        PERFORM tidemark_cover_ahead(watermark_id, done.id);
    END IF;
    RETURN NEXT done;
END
$$;

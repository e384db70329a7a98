-- Commit: a batch becomes succeeded and the watermark advances in one transaction (invariants 1,
-- 3, 4, 8). Lock order: watermark, then the batch's backfill, then the batch.

-- The never-decreasing merge of a watermark value with a batch's report (datetime: the later
-- instant; key_value: per-key maximum, missing keys kept; file_set: union; int: the larger). The
-- only implementation: Python asks it too (watermarks.merge_values).
CREATE OR REPLACE FUNCTION tidemark_merge_watermark(p_type text, p_old jsonb, p_new jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_new IS NULL OR p_new = 'null'::jsonb THEN p_old
        WHEN p_old IS NULL OR p_old = 'null'::jsonb THEN p_new
        WHEN p_type = 'datetime' THEN
            CASE WHEN (p_new #>> '{}')::timestamptz > (p_old #>> '{}')::timestamptz
                 THEN p_new ELSE p_old END
        WHEN p_type = 'key_value' THEN (
            SELECT coalesce(jsonb_object_agg(key, top), '{}'::jsonb)
            FROM (
                SELECT key, max((value #>> '{}')::numeric) AS top
                FROM (SELECT * FROM jsonb_each(p_old) UNION ALL SELECT * FROM jsonb_each(p_new)) AS kv
                GROUP BY key
            ) AS merged
        )
        WHEN p_type = 'file_set' THEN (
            SELECT coalesce(jsonb_agg(name ORDER BY name COLLATE "C"), '[]'::jsonb)
            FROM (
                SELECT jsonb_array_elements_text(p_old) UNION SELECT jsonb_array_elements_text(p_new)
            ) AS files(name)
        )
        ELSE to_jsonb(greatest((p_old #>> '{}')::numeric, (p_new #>> '{}')::numeric))
    END
$$;

-- Move a locked watermark over the gap-free run of committed batches that starts at its position,
-- merging what they reported, and record one WatermarkEvent. PL/pgSQL takes a fresh snapshot per
-- statement, so the advance sees every batch committed before the watermark lock was granted.
-- It walks from the position one batch at a time (an index search of the job's incremental
-- batches by their end), so a commit reads only the batches it moves over: a batch that stays
-- running while later ones commit (they wait behind it, however many) costs each commit one
-- search, not a read of every waiting batch.
CREATE OR REPLACE FUNCTION tidemark_advance(
    p_watermark bigint, p_trigger bigint, p_actor text, p_reason text
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    wm inventory_watermark%ROWTYPE;
    new_position bigint;
    new_value jsonb;
    pos bigint;
    nxt record;
    top bigint := tidemark_top_position();
BEGIN
    -- the caller holds this row's lock
    SELECT * INTO wm FROM inventory_watermark WHERE id = p_watermark;
    new_value := wm.value;
    pos := wm.position;
    LOOP
        -- the next batch holding a range past `pos` (holding batches of the incremental lane
        -- never overlap: the exclusion constraint), if it starts at `pos` and is committed
        SELECT lower(span) AS lo, upper(span) AS hi, status, watermark_value INTO nxt
        FROM inventory_batch
        WHERE job_id = wm.job_id AND backfill_id IS NULL
          AND status = ANY(tidemark_holding_statuses())
          AND upper(span) > pos AND upper(span) <= top  -- the index search
        ORDER BY upper(span)
        LIMIT 1;
        EXIT WHEN NOT FOUND OR nxt.lo > pos
            OR NOT (nxt.status = ANY(tidemark_committed_statuses()));
        pos := nxt.hi;
        new_position := pos;
        IF wm.type <> 'int' THEN
            new_value := tidemark_merge_watermark(wm.type, new_value, nxt.watermark_value);
        END IF;
    END LOOP;
    IF new_position IS NULL THEN
        RETURN;
    END IF;
    IF wm.type = 'int' THEN
        new_value := to_jsonb(new_position - 1);
    END IF;
    -- the event and the move in one statement (migration 0051)
    WITH event AS (
        INSERT INTO inventory_watermarkevent (
            watermark_id, old_position, new_position, old_value, new_value, source, batch_id,
            actor, reason, is_replay, created_at
        ) VALUES (
            wm.id, wm.position, new_position, wm.value, new_value, 'batch', p_trigger,
            coalesce(p_actor, ''), coalesce(p_reason, ''), false, statement_timestamp()
        )
    )
    UPDATE inventory_watermark
    SET position = new_position, value = new_value, updated_at = statement_timestamp()
    WHERE id = wm.id;
END
$$;

-- Mark a running backfill completed once none of its batches is open. The caller holds its row.
CREATE OR REPLACE FUNCTION tidemark_complete_backfill(p_backfill bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM inventory_batch
        WHERE backfill_id = p_backfill AND NOT (status = ANY(tidemark_backfill_done_statuses()))
    ) THEN
        PERFORM tidemark_backfill_transition(p_backfill, ARRAY['running'], 'completed');
    END IF;
END
$$;

-- A backfill batch that committed items past the watermark while starting below it (a
-- restatement carrying the item that restates, services/restatement_records.py) covers them in
-- the incremental lane: a skipped incremental batch over [position, its end) names it, and the
-- watermark moves over it, so the incremental lane never reads those items a second time. When
-- the incremental lane holds some of them, it reads them itself. The caller holds the
-- watermark's row lock.
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

-- Fence and commit one attempt: running, this attempt, a lease still alive by the database's clock
-- after the locks were granted. Returns the committed batch, or nothing when fenced out (the
-- caller says why). Called in autocommit it is a single round trip and a single transaction.
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

-- The value a job's watermark has at each boundary of its committed incremental batches: what they
-- reported, merged in span order from the job's start (the same fold tidemark_advance applies). A
-- correction by position takes its value from here, and a value-only correction finds its
-- position here, so a correction can never set a value its committed batches do not give.
CREATE OR REPLACE FUNCTION tidemark_watermark_boundaries(p_job bigint)
RETURNS TABLE(boundary bigint, value jsonb) LANGUAGE plpgsql STABLE AS $$
DECLARE
    wm_type text;
    folded jsonb := NULL;
    committed record;
BEGIN
    SELECT type INTO wm_type FROM inventory_watermark WHERE job_id = p_job;
    FOR committed IN
        SELECT upper(span) AS hi, watermark_value FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND status = ANY(tidemark_committed_statuses())
        ORDER BY lower(span)
    LOOP
        folded := tidemark_merge_watermark(wm_type, folded, committed.watermark_value);
        boundary := committed.hi;
        value := folded;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Several batches committed in one call (the REST API's succeed-batches/), in the order given:
-- each by tidemark_succeed, as alone, in the caller's one transaction. A batch whose attempt may
-- not commit is left as it is and missing from the rows returned (the caller says why), and the
-- others commit. The caller passes batches of one job: their commits then queue on that job's
-- watermark row, which the first takes, so two such calls never hold each other's locks.
CREATE OR REPLACE FUNCTION tidemark_succeed_batches(
    p_batches bigint[], p_attempts integer[], p_results jsonb[], p_values jsonb[]
) RETURNS SETOF inventory_batch LANGUAGE plpgsql AS $$
DECLARE
    done inventory_batch%ROWTYPE;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_batches, 1), 0) LOOP
        SELECT * INTO done
        FROM tidemark_succeed(p_batches[i], p_attempts[i], p_results[i], p_values[i]);
        IF done.id IS NOT NULL THEN
            RETURN NEXT done;
        END IF;
    END LOOP;
END
$$;

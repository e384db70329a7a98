-- 0033: the watermark advance (schema/commit.sql) and the next incremental start
-- (schema/planning.sql) walk the job's batches by index searches instead of reading every batch
-- past the watermark, so a commit and an acquire cost the same however many batches wait behind
-- one that is still running.

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
    INSERT INTO inventory_watermarkevent (
        watermark_id, old_position, new_position, old_value, new_value, source, batch_id, actor,
        reason, is_replay, created_at
    ) VALUES (
        wm.id, wm.position, new_position, wm.value, new_value, 'batch', p_trigger,
        coalesce(p_actor, ''), coalesce(p_reason, ''), false, statement_timestamp()
    );
    UPDATE inventory_watermark
    SET position = new_position, value = new_value, updated_at = statement_timestamp()
    WHERE id = wm.id;
END
$$;

CREATE OR REPLACE FUNCTION tidemark_incremental_start(p_job bigint, OUT lo bigint, OUT hi bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    wm_position bigint;
    top bigint := tidemark_top_position();
    first_held record;
    gone record;
    nxt record;
    x bigint;
    gone_count integer;
BEGIN
    SELECT position INTO wm_position FROM inventory_watermark WHERE job_id = p_job;
    SELECT count(*) INTO gone_count FROM (
        SELECT 1 FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND NOT (status = ANY(tidemark_holding_statuses()))
          AND upper(span) > wm_position AND upper(span) <= top
        LIMIT 33
    ) AS g;
    IF gone_count > 32 THEN
        WITH held AS (
            SELECT lower(span) AS b_lo, upper(span) AS b_hi FROM inventory_batch
            WHERE job_id = p_job AND backfill_id IS NULL
              AND status = ANY(tidemark_holding_statuses())
              AND upper(span) > wm_position AND upper(span) <= top
        ), ordered AS (
            SELECT b_lo, b_hi, lag(b_hi, 1, wm_position) OVER (ORDER BY b_lo) AS prev_hi FROM held
        ), hole AS (
            SELECT prev_hi AS h_lo, b_lo AS h_hi FROM ordered WHERE b_lo > prev_hi
            ORDER BY b_lo LIMIT 1
        )
        SELECT coalesce((SELECT h_lo FROM hole), (SELECT max(b_hi) FROM held), wm_position),
               (SELECT h_hi FROM hole)
        INTO lo, hi;
        RETURN;
    END IF;
    SELECT lower(span) AS b_lo INTO first_held FROM inventory_batch
    WHERE job_id = p_job AND backfill_id IS NULL
      AND status = ANY(tidemark_holding_statuses())
      AND upper(span) > wm_position AND upper(span) <= top
    ORDER BY upper(span) LIMIT 1;
    IF NOT FOUND THEN
        lo := wm_position;  -- nothing holds a range past the watermark
        RETURN;
    END IF;
    IF first_held.b_lo > wm_position THEN
        lo := wm_position;  -- a hole at the watermark
        hi := first_held.b_lo;
        RETURN;
    END IF;
    <<gones>>
    FOR gone IN
        SELECT lower(span) AS g_lo, upper(span) AS g_hi FROM inventory_batch
        WHERE job_id = p_job AND backfill_id IS NULL
          AND NOT (status = ANY(tidemark_holding_statuses()))
          AND upper(span) > wm_position AND upper(span) <= top
        ORDER BY lower(span)
    LOOP
        x := greatest(gone.g_lo, wm_position);
        WHILE x < gone.g_hi LOOP
            SELECT lower(span) AS b_lo, upper(span) AS b_hi INTO nxt FROM inventory_batch
            WHERE job_id = p_job AND backfill_id IS NULL
              AND status = ANY(tidemark_holding_statuses())
              AND upper(span) > x AND upper(span) <= top
            ORDER BY upper(span) LIMIT 1;
            -- nothing holds a range past x: no hole at x or after it, and the walks so far
            -- found none before it
            EXIT gones WHEN NOT FOUND;
            IF nxt.b_lo > x THEN
                -- a hole up to nxt, from the end of the holding batch before it
                SELECT greatest(coalesce(max(upper(span)), wm_position), wm_position) INTO lo
                FROM inventory_batch
                WHERE job_id = p_job AND backfill_id IS NULL
                  AND status = ANY(tidemark_holding_statuses())
                  AND upper(span) <= x AND upper(span) > wm_position;
                hi := nxt.b_lo;
                RETURN;
            END IF;
            x := nxt.b_hi;
        END LOOP;
    END LOOP;
    SELECT upper(span) INTO lo FROM inventory_batch  -- after the last holding batch
    WHERE job_id = p_job AND backfill_id IS NULL
      AND status = ANY(tidemark_holding_statuses())
      AND upper(span) > wm_position AND upper(span) <= top
    ORDER BY upper(span) DESC LIMIT 1;
END
$$;

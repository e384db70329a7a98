-- The freshness-driven backfill throttle (docs/throttle.md): the freshness controller's rate is one
-- more global budget of the shared backfill throttle, its concurrency cap bounds each backfill's
-- running batches, and acquire locks its row when it limits, so two acquirers cannot both spend
-- the last of its budget.

CREATE OR REPLACE FUNCTION tidemark_freshness_rate() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(pinned_rate, CASE WHEN enabled THEN rate END)
    FROM inventory_freshnessthrottle WHERE id = 1
$$;

CREATE OR REPLACE FUNCTION tidemark_freshness_concurrency() RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN enabled AND pinned_rate IS NULL THEN concurrency END
    FROM inventory_freshnessthrottle WHERE id = 1
$$;

CREATE OR REPLACE FUNCTION tidemark_throttle_admits(p_connector bigint, p_weights bigint[])
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    budget_all bigint;
    budget_own bigint;
    used_all bigint;
    used_own bigint;
    admitted integer := 0;
    w bigint;
BEGIN
    SELECT weight_per_minute INTO budget_all FROM inventory_backfillthrottle
    WHERE connector_id IS NULL;
    SELECT weight_per_minute INTO budget_own FROM inventory_backfillthrottle
    WHERE connector_id = p_connector;
    -- the freshness controller's rate is one more global budget (LEAST skips a NULL)
    budget_all := least(budget_all, tidemark_freshness_rate());
    IF budget_all IS NULL AND budget_own IS NULL THEN
        RETURN coalesce(cardinality(p_weights), 0);
    END IF;
    SELECT coalesce(sum(b.weight), 0),
           coalesce(sum(b.weight) FILTER (WHERE j.connector_id = p_connector), 0)
    INTO used_all, used_own
    FROM inventory_batch AS b JOIN inventory_job AS j ON j.id = b.job_id
    WHERE b.backfill_id IS NOT NULL
      AND b.started_at >= statement_timestamp() - tidemark_throttle_window();
    FOREACH w IN ARRAY p_weights LOOP
        EXIT WHEN budget_all IS NOT NULL AND used_all > 0 AND used_all + w > budget_all;
        EXIT WHEN budget_own IS NOT NULL AND used_own > 0 AND used_own + w > budget_own;
        used_all := used_all + w;
        used_own := used_own + w;
        admitted := admitted + 1;
    END LOOP;
    RETURN admitted;
END
$$;

CREATE OR REPLACE FUNCTION tidemark_backfill_admissible(p_backfill bigint)
RETURNS SETOF bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    f inventory_backfill%ROWTYPE;
    v_connector bigint;
    free integer;
    ids bigint[];
    weights bigint[];
BEGIN
    SELECT * INTO f FROM inventory_backfill WHERE id = p_backfill;
    IF NOT FOUND OR f.status <> 'running' THEN
        RETURN;
    END IF;
    free := least(f.max_concurrency, tidemark_freshness_concurrency()) - (
        SELECT count(*) FROM inventory_batch WHERE backfill_id = p_backfill AND status = 'running'
    );
    IF free <= 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(d.id ORDER BY d.lo), array_agg(d.weight ORDER BY d.lo) INTO ids, weights
    FROM (
        SELECT b.id, b.weight, lower(b.span) AS lo FROM inventory_batch AS b
        WHERE b.backfill_id = p_backfill AND tidemark_batch_due(b.status, b.next_attempt_at)
        ORDER BY lower(b.span)
        LIMIT free
    ) AS d;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    SELECT connector_id INTO v_connector FROM inventory_job WHERE id = f.job_id;
    RETURN QUERY SELECT unnest(ids[1:tidemark_throttle_admits(v_connector, weights)]);
END
$$;

CREATE OR REPLACE FUNCTION tidemark_claim_backfill(p_job bigint, p_urgent boolean)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    candidate bigint;
    v_connector bigint;
    claimed bigint;
BEGIN
    SELECT connector_id INTO v_connector FROM inventory_job WHERE id = p_job;
    -- urgent backfills (priority > 0) go before incremental work, the others after it; only a
    -- backfill with a waiting batch is locked, so the hot path locks nothing it does not use
    FOR candidate IN
        SELECT f.id FROM inventory_backfill AS f
        WHERE f.job_id = p_job AND f.status = 'running' AND (f.priority > 0) = p_urgent
          AND EXISTS (
              SELECT 1 FROM inventory_batch AS w
              WHERE w.backfill_id = f.id
                AND tidemark_batch_due(w.status, w.next_attempt_at)
          )
        ORDER BY f.priority DESC, f.id
    LOOP
        PERFORM 1 FROM inventory_backfill WHERE id = candidate AND status = 'running' FOR UPDATE;
        CONTINUE WHEN NOT FOUND;  -- paused or cancelled meanwhile
        PERFORM 1 FROM inventory_backfillthrottle
        WHERE connector_id IS NULL OR connector_id = v_connector
        ORDER BY id
        FOR UPDATE;
        -- the freshness controller's row, when it limits the rate (its budget is spent here too)
        PERFORM 1 FROM inventory_freshnessthrottle
        WHERE id = 1 AND (pinned_rate IS NOT NULL OR (enabled AND rate IS NOT NULL))
        FOR UPDATE;
        SELECT b.id INTO claimed FROM inventory_batch AS b
        WHERE b.id IN (SELECT tidemark_backfill_admissible(candidate))
          AND tidemark_batch_due(b.status, b.next_attempt_at)
        ORDER BY lower(b.span)
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF claimed IS NOT NULL THEN
            RETURN claimed;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

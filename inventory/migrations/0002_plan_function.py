"""tidemark_plan_batches: the greedy, exact batch planner, run inside PostgreSQL.

It reads item rows (uid, weight) in uid order from the query it is given and cuts them into continuous ranges whose weight
stays within the budget (always at least one item) and whose count stays within the cap. One pass,
no item ever leaves the database: a 1M-item backfill plan takes well under a second.
The query text comes from psycopg2's own parameter binding (cursor.mogrify) over validated, quoted
identifiers: filter values are adapted by the driver exactly as in any other query.
"""

from django.db import migrations

CREATE = r"""
CREATE OR REPLACE FUNCTION tidemark_plan_batches(
    items_sql text, first_id bigint, end_id bigint, budget bigint, cap integer, max_batches integer
) RETURNS TABLE(lower bigint, upper bigint, item_count integer, weight bigint)
LANGUAGE plpgsql AS $$
DECLARE
    uid bigint;
    w bigint;
    cur_lo bigint := first_id;
    cur_last bigint;
    cur_n integer := 0;
    cur_w bigint := 0;
    emitted integer := 0;
BEGIN
    FOR uid, w IN EXECUTE items_sql LOOP
        IF w IS NULL OR w < 0 THEN
            RAISE EXCEPTION 'item % has weight %; weights must be non-negative', uid, w
                USING ERRCODE = '22023';
        END IF;
        IF cur_n > 0 AND (cur_w + w > budget OR cur_n >= cap) THEN
            lower := cur_lo; upper := cur_last + 1; item_count := cur_n; weight := cur_w;
            RETURN NEXT;
            emitted := emitted + 1;
            IF max_batches IS NOT NULL AND emitted >= max_batches THEN
                RETURN;
            END IF;
            cur_lo := cur_last + 1; cur_n := 0; cur_w := 0;
        END IF;
        cur_n := cur_n + 1; cur_w := cur_w + w; cur_last := uid;
    END LOOP;
    IF cur_n > 0 THEN
        -- the source is exhausted: the last range closes the requested stretch
        lower := cur_lo; upper := coalesce(end_id, cur_last + 1); item_count := cur_n; weight := cur_w;
        RETURN NEXT;
    END IF;
END
$$;
"""

DROP = (
    "DROP FUNCTION IF EXISTS tidemark_plan_batches(text, bigint, bigint, bigint, integer, integer);"
)


class Migration(migrations.Migration):
    dependencies = [("inventory", "0001_initial")]

    operations = [migrations.RunSQL(CREATE, DROP)]

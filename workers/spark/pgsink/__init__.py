"""PostgreSQL table sink (one module per step: config, target, staging, merge; sink.py runs them):
parallel COPY into a staging table, then one merging transaction.

sink = {"kind": "postgres", "dsn_env": "ENV_VAR", "table": "schema.table", "key": [...],
        "mode": "append" | "upsert" | "coalesce", "order_by": optional column,
        "version_column": optional column}

1. The target table is created from the DataFrame's schema if missing (primary key on `key`).
   Tidemark adds the columns it needs: `_tm_batch_id` (append: which batch wrote the row) and,
   for upsert/coalesce without a `version_column`, `_tm_version` (the batch's source order).
2. Every Spark partition COPYs its rows into an unlogged staging table unique to this attempt,
   from the executors, with nothing but psycopg2. A partition replaces its own rows in the staging
   table, so a retried Spark task does not stage them twice.
3. Inside the publish fence (workers/spark/fence.py), one transaction of the sink database merges:
   - it locks the batch's row in `<schema>._tidemark_sink_ledger` and refuses an attempt older
     than the one recorded there (a stale attempt never overwrites a newer one's rows);
   - append deletes the rows of this batch and of the batches it replaces, then inserts;
   - upsert updates every non-key column, coalesce each column to COALESCE(new, stored), so a
     null in a partial update keeps the stored value; both only where the new row's version is
     not older than the stored one's (the declared `version_column`, else the batch's source
     order), so an older batch committing late never overwrites a newer one. Rows equal to the
     stored ones are not rewritten, so re-running a batch changes nothing;
   - it records (batch, attempt, rows) in the ledger, in the same transaction as the rows.
4. The staging table is dropped.

The DSN is read from the environment variable named by `dsn_env` on the driver and never shown in
an error. Identifiers are validated and quoted; values travel only through COPY or bound params.
"""

from workers.spark.pgsink.config import MODES
from workers.spark.pgsink.sink import check_postgres, write_postgres

__all__ = ["MODES", "check_postgres", "write_postgres"]

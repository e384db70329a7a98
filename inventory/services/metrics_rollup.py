"""The attempt rollup behind /metrics' attempt counters (models.AttemptRollup), advanced by the
lease reaper's step (scheduling.leases_reap) so that no scrape writes.

Two boundaries, kept in `MaintenanceRun("attempt-rollup").outcome`:

- `below_id`: every attempt with a smaller id is counted in the rollup's "started" rows (outcome
  ""). An attempt is started once its row exists, whether it runs for hours or never finishes, so
  this boundary never waits for a running attempt: it stops only in front of attempts inserted
  in the last SETTLE_MINUTES (an insert that has not committed yet may hold a smaller id than
  rows already visible).
- `finished_before`: every attempt that finished before this time is counted in its outcome's
  rows. A finished attempt never changes, and it is found by its finish time (the partial index
  attempt_finished_idx), so attempts still running, however old, hold nothing back. The boundary
  stays SETTLE_MINUTES behind the database's clock: a finish is stamped with the time its
  transaction started, and one still committing must not land behind the boundary.

A scrape (selectors_alerts.attempt_counts) adds the attempts at or after each boundary: those
inserted or finished in the last minutes, whatever the age of the oldest running attempt.

A rollup written before `finished_before` existed (one id boundary for both counts, stopped by the
oldest running attempt) is not read by scrapes and is rebuilt from the attempts by the next
advance."""

from django.db import connection, transaction

ROLLUP = "attempt-rollup"
SETTLE_MINUTES = 5
ADVISORY_KEY = 0x7D3A11  # one roller at a time; a scrape that finds it busy only reads

# The boundaries as one row (below_id, finished_before); finished_before is NULL for no rollup
# (none yet, or one written before it existed, whose rows scrapes ignore).
BOUNDARIES_SQL = """
SELECT coalesce((outcome->>'below_id')::bigint, 0) AS below_id,
       (outcome->>'finished_before')::timestamptz AS finished_before
FROM inventory_maintenancerun WHERE name = %s
"""


def attempt_rollup_boundaries(cursor) -> tuple[int, object]:
    """(below_id, finished_before) of the rollup; (0, None) when there is none to read."""
    cursor.execute(BOUNDARIES_SQL, [ROLLUP])
    row = cursor.fetchone()
    if row is None or row[1] is None:
        return 0, None
    return row[0], row[1]


def attempt_rollup_advance() -> tuple[int, object]:
    """Move both boundaries forward over settled attempts; returns (below_id, finished_before)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_KEY])
        if not cursor.fetchone()[0]:
            return attempt_rollup_boundaries(cursor)
        old_id, old_time = attempt_rollup_boundaries(cursor)
        if old_time is None:
            # no rollup yet, or one of the old single-boundary kind: count everything afresh
            cursor.execute("DELETE FROM inventory_attemptrollup")
        cursor.execute(
            """
            SELECT coalesce(
                       (SELECT max(id) + 1 FROM inventory_batchattempt
                        WHERE id >= %s AND started_at < statement_timestamp() - make_interval(mins => %s)),
                       %s),
                   statement_timestamp() - make_interval(mins => %s)
            """,
            [old_id, SETTLE_MINUTES, old_id, SETTLE_MINUTES],
        )
        new_id, new_time = cursor.fetchone()
        if old_time is not None and new_time < old_time:
            new_time = old_time  # the database's clock went back: never count a finish twice
        cursor.execute(
            """
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
            DO UPDATE SET count = inventory_attemptrollup.count + excluded.count
            """,
            {"old_id": old_id, "new_id": new_id, "old_time": old_time, "new_time": new_time},
        )
        cursor.execute(
            "INSERT INTO inventory_maintenancerun (name, last_run_at, outcome) "
            "VALUES (%s, statement_timestamp(), "
            "jsonb_build_object('below_id', %s::bigint, 'finished_before', %s::timestamptz)) "
            "ON CONFLICT (name) DO UPDATE SET last_run_at = excluded.last_run_at, "
            "outcome = excluded.outcome",
            [ROLLUP, new_id, new_time],
        )
        return new_id, new_time

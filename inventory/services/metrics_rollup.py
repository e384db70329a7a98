"""The attempt rollup behind /metrics' attempt counters (models.AttemptRollup), advanced by the
lease reaper's step (scheduling.leases_reap) so that no scrape writes.

Finished attempts never change, so their counts per job and outcome are added to the rollup once
and a scrape only counts the attempts after the rollup's boundary. The boundary stops in front of
the oldest attempt still running and of attempts started in the last minutes (an attempt row is
inserted in a short transaction: one that has not committed yet may hold a smaller id)."""

from django.db import connection, transaction

ROLLUP = "attempt-rollup"
SETTLE_MINUTES = 5
ADVISORY_KEY = 0x7D3A11  # one roller at a time; a scrape that finds it busy only reads


def attempt_rollup_boundary(cursor) -> int:
    cursor.execute(
        "SELECT coalesce((outcome->>'below_id')::bigint, 0) FROM inventory_maintenancerun "
        "WHERE name = %s",
        [ROLLUP],
    )
    row = cursor.fetchone()
    return row[0] if row else 0


def attempt_rollup_advance() -> int:
    """Move the boundary forward over settled attempts; returns the new boundary."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_KEY])
        if not cursor.fetchone()[0]:
            return attempt_rollup_boundary(cursor)
        old = attempt_rollup_boundary(cursor)
        cursor.execute(
            """
            SELECT least(
                (SELECT min(a.id) FROM inventory_batch AS b
                 JOIN inventory_batchattempt AS a ON a.batch_id = b.id AND a.number = b.attempt
                 WHERE b.status = 'running'),
                (SELECT a.id FROM inventory_batchattempt AS a
                 WHERE a.id >= %s
                   AND a.started_at >= statement_timestamp() - make_interval(mins => %s)
                 ORDER BY a.id LIMIT 1),
                (SELECT max(id) + 1 FROM inventory_batchattempt)
            )
            """,
            [old, SETTLE_MINUTES],
        )
        new = cursor.fetchone()[0]
        if new is None or new <= old:
            return old
        cursor.execute(
            """
            INSERT INTO inventory_attemptrollup (job_id, outcome, count)
            SELECT b.job_id, a.outcome, count(*) FROM inventory_batchattempt AS a
            JOIN inventory_batch AS b ON b.id = a.batch_id
            WHERE a.id >= %s AND a.id < %s GROUP BY b.job_id, a.outcome
            ON CONFLICT (job_id, outcome)
            DO UPDATE SET count = inventory_attemptrollup.count + excluded.count
            """,
            [old, new],
        )
        cursor.execute(
            "INSERT INTO inventory_maintenancerun (name, last_run_at, outcome) "
            "VALUES (%s, statement_timestamp(), jsonb_build_object('below_id', %s::bigint)) "
            "ON CONFLICT (name) DO UPDATE SET last_run_at = excluded.last_run_at, "
            "outcome = excluded.outcome",
            [ROLLUP, new],
        )
        return new

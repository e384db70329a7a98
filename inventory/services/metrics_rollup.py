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

from inventory.sql import gateway

ROLLUP = "attempt-rollup"
SETTLE_MINUTES = 5
ADVISORY_KEY = 0x7D3A11  # one roller at a time; a scrape that finds it busy only reads


def attempt_rollup_advance() -> tuple[int, object]:
    """Move both boundaries forward over settled attempts; returns (below_id, finished_before)."""
    return gateway.attempt_rollup_advance(
        rollup=ROLLUP, settle_minutes=SETTLE_MINUTES, lock_key=ADVISORY_KEY
    )

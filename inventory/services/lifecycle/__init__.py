"""The batch lifecycle: every change of a batch's status goes through this package, and through
the SQL functions that own status writes (inventory/sql/schema/transitions.sql).

queued -> running -> succeeded; running -> failed -> queued (backoff) until max_attempts, then dead;
queued|running|failed -> cancelled; dead -> skipped (with a reason); committed -> superseded (a
replay). The allowed moves are the rows of the tables tidemark_batch_move and
tidemark_backfill_move; tidemark_batch_insert (a batch is born), tidemark_batch_transition (a
batch moves) and tidemark_backfill_transition (a backfill moves) refuse any other, and write every
status (tests/sql/test_status_transitions.py checks nothing else does). `attempt` is the fencing
token: only the holder of the current attempt, with a live lease, may commit (invariant 8). Leases
and retry times are written and judged with the database's clock, never this process's; "due" has
one definition (`batch_due`, the SQL function tidemark_batch_due), "blocked" one
(`job_blocked_reason`, tidemark_job_blocked), incremental planning one (tidemark_plan_next).

Rows are locked in one order on every path, job -> watermark -> backfill -> batch (see
docs/architecture.md, "Lock order"); a path may skip a level, never go back up one.

- `shared`: the transition call, "due", "blocked", row locks and fences;
- `starting`: plan the next batch, acquire (one batch or several), a named start, heartbeat;
- `ending`: succeed (one batch or several), fail, the reaper, the requeue of due retries;
- `operator`: retry, cancel, skip, supersede, cancel many, a batch born skipped.
"""

from inventory.services.lifecycle.ending import (
    REAPER_LOCK_TIMEOUT,
    Commits,
    batch_fail,
    batch_succeed,
    batches_reap_expired,
    batches_requeue_due,
    batches_succeed,
    fail_locked,
)
from inventory.services.lifecycle.operator import (
    SUPERSEDABLE_STATUSES,
    WAITING_STATUSES,
    batch_cancel,
    batch_insert_skipped,
    batch_retry,
    batch_skip,
    batches_cancel,
    batches_cancel_waiting,
    batches_insert,
    batches_supersede,
)
from inventory.services.lifecycle.shared import (
    MAX_BATCHES_PER_CALL,
    backfills_transition,
    batch_due,
    batches_transition,
    config_snapshot,
    job_blocked_reason,
)
from inventory.services.lifecycle.starting import (
    backfill_start_blocked,
    batch_acquire,
    batch_heartbeat,
    batch_lock_for_start,
    batch_plan_next,
    batch_start,
    batch_start_locked,
    batches_acquire,
    batches_plan,
)

__all__ = [
    "MAX_BATCHES_PER_CALL",
    "REAPER_LOCK_TIMEOUT",
    "SUPERSEDABLE_STATUSES",
    "WAITING_STATUSES",
    "backfill_start_blocked",
    "backfills_transition",
    "batch_acquire",
    "batch_cancel",
    "batch_due",
    "batch_fail",
    "batch_heartbeat",
    "batch_insert_skipped",
    "batch_lock_for_start",
    "batch_plan_next",
    "batch_retry",
    "batch_skip",
    "batch_start",
    "batch_start_locked",
    "batch_succeed",
    "batches_acquire",
    "batches_cancel",
    "batches_cancel_waiting",
    "batches_insert",
    "batches_plan",
    "batches_reap_expired",
    "batches_requeue_due",
    "batches_succeed",
    "batches_supersede",
    "batches_transition",
    "Commits",
    "config_snapshot",
    "fail_locked",
    "job_blocked_reason",
]

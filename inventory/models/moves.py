"""The allowed moves of a batch's and of a backfill's status, as Python reads them: (from, to),
where from NEW is a row's birth. SQL's definition is inventory/sql/schema/moves.sql (the tables
the transition functions probe hold its rows); tests/sql/test_status_transitions.py keeps the two
equal, and every status write goes through those functions (a move not listed is refused)."""

from inventory.models.backfills import BackfillStatus
from inventory.models.batches import BatchStatus

NEW = "new"

_B = BatchStatus
BATCH_MOVES: frozenset[tuple[str, str]] = frozenset(
    (str(frm), str(to))
    for frm, to in (
        (NEW, _B.QUEUED), (NEW, _B.RUNNING), (NEW, _B.SKIPPED),
        (_B.QUEUED, _B.RUNNING), (_B.QUEUED, _B.CANCELLED), (_B.QUEUED, _B.SUPERSEDED),
        (_B.RUNNING, _B.SUCCEEDED), (_B.RUNNING, _B.FAILED), (_B.RUNNING, _B.DEAD),
        (_B.RUNNING, _B.CANCELLED),
        (_B.FAILED, _B.QUEUED), (_B.FAILED, _B.RUNNING), (_B.FAILED, _B.CANCELLED),
        (_B.FAILED, _B.SUPERSEDED),
        (_B.DEAD, _B.QUEUED), (_B.DEAD, _B.SKIPPED), (_B.DEAD, _B.SUPERSEDED),
        (_B.SUCCEEDED, _B.SUPERSEDED),
        (_B.SKIPPED, _B.SUPERSEDED),
    )
)  # fmt: skip

_F = BackfillStatus
BACKFILL_MOVES: frozenset[tuple[str, str]] = frozenset(
    (str(frm), str(to))
    for frm, to in (
        (NEW, _F.RUNNING),
        (_F.RUNNING, _F.PAUSED), (_F.PAUSED, _F.RUNNING),
        (_F.RUNNING, _F.CANCELLED), (_F.PAUSED, _F.CANCELLED),
        (_F.RUNNING, _F.COMPLETED),
    )
)  # fmt: skip

"""What a restatement did for one job, recorded: rebuilt at once, proposed, or waiting.

`restatements.py` finds input a job already committed that changed; here each job's share becomes
a `Restatement` row. The job's policy decides: `automatic` creates the backfill now (status
`applied`), `proposed` records the plan the backfill would run, with its fingerprint, for an
operator to apply (`restatement_apply`, which creates exactly that backfill through
`backfills.backfill_create`, or is refused with the plan as it is now) or dismiss with a reason.
A job with a batch running over the items gets a `pending` record, turned into one of the others
when the restatement is tried again. Every front (API, dashboard, admin) calls these functions.
"""

from django.db import transaction
from django.db.models.functions import Now

from inventory.models import (
    OPEN_STATUSES,
    Backfill,
    Batch,
    BatchKind,
    Job,
    Restatement,
    RestatementPolicy,
    RestatementStatus,
)
from inventory.services import backfills, lifecycle
from inventory.services.backfills import BackfillRange
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.reasons import reason_checked, reason_fitted

ACTOR = "tidemark"


def restatement_pending(
    *, job: Job, cause: str, range_start: int, range_end: int, reason: str, detail: dict
) -> Restatement:
    """A batch of `job` is running over the items: one pending record per job and cause, widened
    to every range that waits, until the restatement is tried again."""
    with transaction.atomic():
        pending = (
            Restatement.objects.select_for_update()
            .filter(job=job, cause=cause, status=RestatementStatus.PENDING)
            .first()
        )
        if pending is None:
            return Restatement.objects.create(
                job=job,
                cause=cause,
                status=RestatementStatus.PENDING,
                range_start=range_start,
                range_end=range_end,
                reason=reason,
                detail=detail,
            )
        pending.range_start = min(pending.range_start, range_start)
        pending.range_end = max(pending.range_end, range_end)
        pending.reason, pending.detail = reason, detail
        pending.save(update_fields=["range_start", "range_end", "reason", "detail", "updated_at"])
        return pending


def restatement_open(
    *,
    job: Job,
    cause: str,
    range_start: int,
    range_end: int,
    reason: str,
    detail: dict,
    priority: int = 0,
    through: int | None = None,
) -> Restatement | None:
    """Restate [range_start, range_end] of `job` by its policy: a backfill now (automatic) or a
    proposed replay with its plan (proposed). None when there is nothing to rebuild: a queued or
    retrying batch holds the items (it reads them as they are now when it runs) or none is left.
    A pending record of the same job and cause becomes this one.

    `through`: the last item that restates them (a Delta version that removed their files, an
    upstream commit that replaced their output), not committed by the job yet. The automatic
    backfill then runs as one batch up to it, so the sink goes from the old rows to the new ones
    in one publish (docs/guarantees.md). Incremental batches over that stretch that have not
    written their output are cancelled and their items carried by it; when one already wrote its
    output (or a batch of another backfill holds items of the stretch), the backfill covers the
    restated range alone and the restating item waits for it."""
    with transaction.atomic():
        record = (
            Restatement.objects.select_for_update()
            .filter(job=job, cause=cause, status=RestatementStatus.PENDING)
            .first()
        ) or Restatement(job=job, cause=cause)
        record.range_start, record.range_end = range_start, range_end
        record.reason, record.detail, record.priority = reason, detail, priority
        try:
            with transaction.atomic():
                if job.restatements == RestatementPolicy.PROPOSED:
                    plan = backfills.backfill_preview(
                        job=job, range_start=range_start, range_end=range_end
                    )
                    record.status = RestatementStatus.PROPOSED
                    record.preview = backfills.plan_summary(
                        job=job, span=BackfillRange(range_start, range_end), plan=plan
                    )
                else:
                    record.backfill = _restatement_backfill(
                        job=job,
                        range_start=range_start,
                        range_end=range_end,
                        reason=reason,
                        priority=priority,
                        through=through,
                    )
                    record.status = RestatementStatus.APPLIED
                    record.decided_by = ACTOR
                    record.decided_at = Now()
        except Conflict:
            if record.pk is not None:
                record.delete()
            return None
        record.save()
        record.refresh_from_db(fields=["decided_at"])
        return record


def _restatement_backfill(
    *, job: Job, range_start: int, range_end: int, reason: str, priority: int, through
):
    if through is not None and through > range_end:
        whole = dict(
            job=job,
            range_start=range_start,
            range_end=through,
            reason=reason,
            actor=ACTOR,
            priority=priority,
            whole=True,
        )
        try:
            with transaction.atomic():
                return backfills.backfill_create(**whole)
        except Conflict:
            pass  # a batch holds items up to `through`
        try:
            with transaction.atomic():
                _take_over(job=job, after=range_end, through=through, reason=reason)
                return backfills.backfill_create(**whole)
        except Conflict:
            pass  # one of them already wrote its output: the restated range alone
    return backfills.backfill_create(
        job=job,
        range_start=range_start,
        range_end=range_end,
        reason=reason,
        actor=ACTOR,
        priority=priority,
    )


def _take_over(*, job: Job, after: int, through: int, reason: str) -> None:
    """Cancel the job's incremental batches over (after, through] that have not written their
    output, so the restatement's one batch carries their items: otherwise it would rebuild the
    restated outputs alone and the rows the restating item brings would be missing from the sink
    until that batch publishes. A batch that already wrote its output refuses (Conflict): the
    caller then falls back to the restated range alone. A running worker's attempt then fails
    its fence, as after any cancel."""
    held = Batch.objects.filter(
        job=job,
        kind=BatchKind.INCREMENTAL,
        status__in=OPEN_STATUSES,
        span__overlap=(after + 1, through + 1),
    ).values_list("pk", flat=True)
    if not held:
        raise Conflict("no incremental batch to take over: another kind holds the items")
    for batch_id in held:
        lifecycle.batch_cancel(
            batch_id=batch_id,
            actor=ACTOR,
            reason=reason_fitted(
                f"taken over by the restatement that carries item {through}: {reason}"
            ),
        )


def pending_drop(*, job: Job, cause: str) -> None:
    """The batch a pending record waited for left nothing committed to restate (it failed)."""
    Restatement.objects.filter(job=job, cause=cause, status=RestatementStatus.PENDING).delete()


def _locked_proposal(restatement: Restatement) -> Restatement:
    record = Restatement.objects.select_for_update().select_related("job").get(pk=restatement.pk)
    if record.status != RestatementStatus.PROPOSED:
        raise Conflict(f"restatement {record.pk} is {record.status}, not proposed")
    return record


def restatement_apply(
    *, restatement: Restatement, actor: str, fingerprint: str | None = None
) -> Restatement:
    """Apply a proposed replay: the backfill of its plan (the preview's fingerprint, or the one
    given after a refusal showed the plan as it is now), created by the backfill service. A plan
    that changed since is refused (PlanChanged carrying the plan now); nothing is recorded then."""
    if fingerprint is not None and (not isinstance(fingerprint, str) or len(fingerprint) != 16):
        raise InvalidInput("fingerprint", "must be a preview's 16-character fingerprint")
    with transaction.atomic():
        record = _locked_proposal(restatement)
        pinned = fingerprint or (record.preview or {}).get("fingerprint")
        backfill: Backfill = backfills.backfill_create(
            job=record.job,
            range_start=record.range_start,
            range_end=record.range_end,
            priority=record.priority,
            reason=reason_fitted(f"restatement {record.pk}: {record.reason}"),
            actor=actor,
            fingerprint=pinned,
        )
        record.status = RestatementStatus.APPLIED
        record.backfill = backfill
        record.decided_by = actor
        record.decided_at = Now()
        record.save(update_fields=["status", "backfill", "decided_by", "decided_at", "updated_at"])
    record.refresh_from_db()
    return record


def restatement_dismiss(*, restatement: Restatement, actor: str, reason: str) -> Restatement:
    """Dismiss a proposed replay with a reason: the outputs stay as they are."""
    reason = reason_checked(reason, needed="say why the outputs stay as they are")
    with transaction.atomic():
        record = _locked_proposal(restatement)
        record.status = RestatementStatus.DISMISSED
        record.dismiss_reason = reason
        record.decided_by = actor
        record.decided_at = Now()
        record.save(
            update_fields=["status", "dismiss_reason", "decided_by", "decided_at", "updated_at"]
        )
    record.refresh_from_db()
    return record

"""How long a backfill's batches should take: the one estimate the preview, the running backfill's
ETA (dashboard and API) and the API's preview all show.

A backfill's batches run in waves of `max_concurrency`, each batch as long as the job's recent
succeeded batches took (their median), and no faster than the shared throttle admits (a
weight-per-minute budget). A preview estimates its whole plan; a running backfill the batches it
has left, so the two agree at the start and the ETA shrinks as batches finish. It never judges by
the job's hourly commit rate: a backfill that took seconds committed little in the hour, and an
ETA from that rate said an hour.
"""

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Q

from inventory.models import BackfillThrottle, BatchStatus
from inventory.sql import gateway

RECENT_BATCHES = 20  # the job's last succeeded batches the duration of one is judged by


@dataclass(frozen=True, slots=True)
class Work:
    """What is left to run: batches, their summed weight, how many at once, the shared throttle
    (weight per minute) they draw from, if any."""

    batches: int
    weight: int
    concurrency: int
    throttle: int | None = None


def batch_seconds(job_ids) -> dict[int, float]:
    """Job id -> the median duration in seconds of its last RECENT_BATCHES succeeded batches
    (jobs without one are left out); one statement for all of them."""
    ids = sorted({int(i) for i in job_ids})
    if not ids:
        return {}
    took = gateway.batch_seconds(job_ids=ids, status=BatchStatus.SUCCEEDED, recent=RECENT_BATCHES)
    return {job: _median(seconds) for job, seconds in took.items()}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def duration(work: Work, *, per_batch: float | None) -> timedelta | None:
    """How long `work` should take, given one batch's usual duration (`per_batch`, seconds).
    Zero when nothing is left; None when there is neither a batch to judge by nor a throttle."""
    if work.batches <= 0:
        return timedelta(0)
    estimates = []
    if per_batch is not None:
        waves = -(-work.batches // max(work.concurrency, 1))
        estimates.append(waves * per_batch)
    if work.throttle:
        # the first minute's budget is spent at once; each further one waits for the next minute
        estimates.append(60 * (max(work.weight, 0) // work.throttle))
    if not estimates:
        return None
    return timedelta(seconds=round(max(estimates), 1))


def job_duration(*, job_id: int, work: Work) -> timedelta | None:
    """`duration` of work of one job, judged by that job's recent batches."""
    return duration(work, per_batch=batch_seconds([job_id]).get(job_id))


def throttle_for(*, connector_id: int) -> int | None:
    """The tightest weight-per-minute budget a backfill of a job of `connector_id` draws from."""
    budgets = BackfillThrottle.objects.filter(
        Q(connector__isnull=True) | Q(connector_id=connector_id)
    ).values_list("connector_id", "weight_per_minute")
    return _tightest(budgets, connector_id=connector_id)


def _tightest(budgets, *, connector_id: int) -> int | None:
    """Of (connector id or None, weight per minute) budgets, the tightest that applies."""
    return min((w for c, w in budgets if c is None or c == connector_id), default=None)


def plan_duration(*, job, plan, concurrency: int) -> timedelta | None:
    """A previewed plan's duration: all of its batches."""
    work = Work(
        batches=len(plan),
        weight=sum(p.weight for p in plan),
        concurrency=concurrency,
        throttle=throttle_for(connector_id=job.connector_id),
    )
    return job_duration(job_id=job.pk, work=work)


def left_of(backfill, *, throttle: int | None) -> Work:
    """What a backfill annotated with its progress (selectors_backfills.backfills_with_progress)
    has left: its batches neither committed, dead nor cancelled, and their weight."""
    finished = backfill.batches_done + backfill.batches_dead + backfill.batches_cancelled
    return Work(
        batches=max(backfill.batches_total - finished, 0),
        weight=max(backfill.weight_total - backfill.weight_done, 0),
        concurrency=backfill.max_concurrency,
        throttle=throttle,
    )


def backfill_etas(backfills) -> dict[int, timedelta | None]:
    """Backfill id -> the time its running or pending batches still need (None when it cannot be
    judged); two statements for any number of backfills."""
    backfills = list(backfills)
    per_batch = batch_seconds(b.job_id for b in backfills)
    budgets = list(BackfillThrottle.objects.values_list("connector_id", "weight_per_minute"))
    etas = {}
    for backfill in backfills:
        throttle = _tightest(budgets, connector_id=backfill.job.connector_id)
        etas[backfill.pk] = duration(
            left_of(backfill, throttle=throttle), per_batch=per_batch.get(backfill.job_id)
        )
    return etas

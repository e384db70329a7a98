"""Freshness targets: how far each live job with a target is behind, and whether it misses it.

Items behind are the job's lag (selectors.jobs_lag). Seconds behind are the age of the oldest item
the job has not committed (the first registered asset at or after its watermark, one index probe
of asset_connector_id_idx, all jobs in one statement: queries.sql jobs_oldest_waiting); for a job whose items are not Tidemark's assets (a local meta table, a
job_output connector), how far a datetime watermark's source time is behind now, else unknown. A
target that cannot be read now is not counted as missed: the controller acts on what it knows."""

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Q

from inventory import selectors
from inventory.models import FreshnessThrottle, Job, ThrottleDecision
from inventory.selectors_health import time_lag
from inventory.sql import gateway


@dataclass(frozen=True)
class JobFreshness:
    job_id: int
    name: str
    target_seconds: int | None
    target_items: int | None
    seconds_behind: int | None  # None: cannot be read now
    items_behind: int | None

    @property
    def missing(self) -> bool:
        late = (
            self.target_seconds is not None
            and self.seconds_behind is not None
            and self.seconds_behind > self.target_seconds
        )
        behind = (
            self.target_items is not None
            and self.items_behind is not None
            and self.items_behind > self.target_items
        )
        return late or behind

    @property
    def used(self) -> float | None:
        """How much of its target the job uses (1.0: at the target; the larger of the two when
        both are set); None when neither can be read now."""
        shares = []
        if self.target_seconds is not None and self.seconds_behind is not None:
            shares.append(self.seconds_behind / self.target_seconds)
        if self.target_items is not None and self.items_behind is not None:
            if self.target_items == 0:
                shares.append(0.0 if self.items_behind == 0 else float(self.items_behind + 1))
            else:
                shares.append(self.items_behind / self.target_items)
        return max(shares) if shares else None

    @property
    def what(self) -> str:
        """What it misses, as the pages say it."""
        parts = []
        if self.target_seconds is not None and self.seconds_behind is not None:
            if self.seconds_behind > self.target_seconds:
                parts.append(f"{self.seconds_behind}s behind (target {self.target_seconds}s)")
        if self.target_items is not None and self.items_behind is not None:
            if self.items_behind > self.target_items:
                parts.append(f"{self.items_behind} items behind (target {self.target_items})")
        return "; ".join(parts)


def targeted_jobs():
    """The live jobs with a freshness target: not paused, with a seconds or an items target."""
    return (
        Job.objects.filter(paused=False)
        .filter(Q(freshness_target_seconds__isnull=False) | Q(freshness_target_items__isnull=False))
        .select_related("connector", "watermark")
        .order_by("name")
    )


def _oldest_waiting(jobs: list[Job]) -> dict[int, int | None]:
    """Job id -> seconds its oldest item not committed has waited (one statement for all):
    0 when nothing waits; for a job whose connector has no assets (a local meta table, a
    job_output connector), how far a datetime watermark is behind now, else None."""
    ids = [job.pk for job in jobs if job.freshness_target_seconds is not None]
    if not ids:
        return {}
    rows = gateway.jobs_oldest_waiting(job_ids=ids)
    ages = {}
    for job in jobs:
        if job.pk not in rows:
            continue
        age, has_assets = rows[job.pk]
        if has_assets:
            ages[job.pk] = int(age or 0)
        else:
            lag = time_lag(job)
            ages[job.pk] = None if lag is None else int(lag / timedelta(seconds=1))
    return ages


def jobs_freshness(jobs=None) -> list[JobFreshness]:
    """Each live job with a target (or each of `jobs`) with how far it is behind."""
    jobs = list(targeted_jobs() if jobs is None else jobs)
    if not jobs:
        return []
    lags = selectors.jobs_lag(jobs)
    ages = _oldest_waiting(jobs)
    found = []
    for job in jobs:
        lag = lags.get(job.pk)
        seconds = ages.get(job.pk)
        found.append(
            JobFreshness(
                job_id=job.pk,
                name=job.name,
                target_seconds=job.freshness_target_seconds,
                target_items=job.freshness_target_items,
                seconds_behind=seconds,
                items_behind=None if lag is None else lag.items,
            )
        )
    return found


def job_freshness(*, job: Job) -> JobFreshness | None:
    """How far one job is from its freshness target; None when it has none."""
    if job.freshness_target_seconds is None and job.freshness_target_items is None:
        return None
    return jobs_freshness([job])[0]


def jobs_missing_target() -> list[JobFreshness]:
    """The live jobs that miss their freshness target now, by name (the overview's list)."""
    return [row for row in jobs_freshness() if row.missing]


@dataclass
class ThrottleStatus:
    """The freshness controller as the backfills page and the API show it."""

    controller: object  # the FreshnessThrottle row (unsaved defaults when none exists yet)
    decisions: list  # the latest ThrottleDecision rows, newest first
    jobs: list[JobFreshness]  # every live job with a target

    @property
    def effective_rate(self) -> int | None:
        row = self.controller
        if row.pinned_rate is not None:
            return row.pinned_rate
        return row.rate if row.enabled else None

    @property
    def effective_concurrency(self) -> int | None:
        row = self.controller
        return row.concurrency if row.enabled and row.pinned_rate is None else None

    @property
    def missing(self) -> list[JobFreshness]:
        return [row for row in self.jobs if row.missing]


def throttle_status(*, decisions: int = 20) -> ThrottleStatus:
    row = FreshnessThrottle.objects.filter(id=1).first() or FreshnessThrottle(id=1)
    return ThrottleStatus(
        controller=row,
        decisions=list(ThrottleDecision.objects.order_by("-id")[:decisions]),
        jobs=jobs_freshness(),
    )

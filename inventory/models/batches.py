"""Batches and their attempts; the status lists (HOLDING_STATUSES, ...); the invariants the database
enforces on them (the exclusion constraint on live spans, partial indexes)."""

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import BigIntegerRangeField, RangeOperators
from django.db import models
from django.db.models import F, Func, Q, Value
from django.db.models.functions import Coalesce

from inventory.models.backfills import Backfill
from inventory.models.jobs import Job


class BatchKind(models.TextChoices):
    INCREMENTAL = "incremental", "incremental"
    BACKFILL = "backfill", "backfill"


class BatchStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    DEAD = "dead", "dead"
    SKIPPED = "skipped", "skipped"
    CANCELLED = "cancelled", "cancelled"
    SUPERSEDED = "superseded", "superseded (replayed)"


# Batches that hold their range: nobody else may plan over it.
HOLDING_STATUSES = (
    BatchStatus.QUEUED,
    BatchStatus.RUNNING,
    BatchStatus.SUCCEEDED,
    BatchStatus.FAILED,
    BatchStatus.DEAD,
    BatchStatus.SKIPPED,
)
# Batches the watermark may move over.
COMMITTED_STATUSES = (BatchStatus.SUCCEEDED, BatchStatus.SKIPPED)
# Batches still to run: an open backfill batch holds the incremental planner back.
OPEN_STATUSES = (BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED)
# Committed batches whose published output stays in the sink until a later batch replaces it.
OUTPUT_STATUSES = (*COMMITTED_STATUSES, BatchStatus.SUPERSEDED)
# A backfill is completed once every one of its batches is in one of these.
BACKFILL_DONE_STATUSES = (BatchStatus.SUCCEEDED, BatchStatus.SKIPPED, BatchStatus.CANCELLED)
# Batches that can never run, so never publish, again (no move leads from these to running): the
# publish fence hands their unrecorded outputs to the sink as replaced.
RETIRED_STATUSES = (BatchStatus.SKIPPED, BatchStatus.CANCELLED, BatchStatus.SUPERSEDED)
# The SQL functions use the same lists (inventory/sql/schema/statuses.sql; tests/sql/test_schema_home.py).


def _point_range(expression):
    """int8range(x, x, '[]'): lets a GiST exclusion constraint compare plain ints without btree_gist."""
    return Func(expression, expression, Value("[]"), function="int8range")


class Batch(models.Model):
    """One unit of work of one job: the half-open id range `span`, from where the job's previous
    batch ended (or its start position) to its last item + 1; ids may skip inside it."""

    # no index of its own on job or backfill: batch_job_status_idx leads with job_id, and
    # batch_backfill_idx holds only backfill batches (every index is written by every batch)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="batches", db_index=False)
    backfill = models.ForeignKey(
        Backfill,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="batches",
        db_index=False,
    )
    kind = models.CharField(max_length=20, choices=BatchKind.choices)
    status = models.CharField(max_length=20, choices=BatchStatus.choices)
    span = BigIntegerRangeField()
    item_count = models.PositiveIntegerField()
    weight = models.BigIntegerField()
    attempt = models.PositiveSmallIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField()
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, default="")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)
    watermark_value = models.JSONField(
        null=True, blank=True, help_text="source-derived watermark reported on success"
    )
    error = models.JSONField(default=dict, blank=True)
    skip_reason = models.TextField(blank=True, default="")
    config_snapshot = models.JSONField(default=dict, blank=True)
    # The sink's side of the batch (invariant 7): which attempt's output a reader of the sink sees,
    # and which later batch removed that output when it published its own (a replay, a backfill,
    # a retry of a refilled hole). Set only under the publish fence (tidemark_publish_begin/end).
    published_attempt = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="the attempt whose output is in the sink"
    )
    # The order in which this job's batches committed (1, 2, ...), assigned by tidemark_succeed
    # under the job's watermark row lock: a downstream `job_output` connector reads the job's
    # commits in this order (invariant 5: visible order = id order).
    commit_seq = models.BigIntegerField(null=True, blank=True)
    replaced_by = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="replaced",
        help_text="the batch whose output replaced this one's in the sink",
        db_index=False,  # batch_replaced_by_idx: only the replaced ones
    )

    class Meta:
        verbose_name_plural = "batches"
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=BatchStatus.values), name="batch_status_valid"
            ),
            models.CheckConstraint(condition=Q(kind__in=BatchKind.values), name="batch_kind_valid"),
            models.CheckConstraint(
                condition=Q(kind=BatchKind.BACKFILL, backfill__isnull=False)
                | Q(kind=BatchKind.INCREMENTAL, backfill__isnull=True),
                name="batch_backfill_matches_kind",
            ),
            models.CheckConstraint(condition=Q(span__isempty=False), name="batch_span_not_empty"),
            # also the index of a downstream job's planning: "commits of job J after sequence S"
            models.UniqueConstraint(
                fields=["job", "commit_seq"],
                name="batch_commit_seq_unique",
                condition=Q(commit_seq__isnull=False),
            ),
            models.CheckConstraint(condition=Q(weight__gte=0), name="batch_weight_non_negative"),
            models.CheckConstraint(
                condition=~Q(status=BatchStatus.RUNNING) | Q(lease_expires_at__isnull=False),
                name="batch_running_has_lease",
            ),
            models.CheckConstraint(
                condition=~Q(status=BatchStatus.SKIPPED) | ~Q(skip_reason=""),
                name="batch_skipped_has_reason",
            ),
            # Invariant 2 in the database: within one job's lane (incremental = backfill 0, or one
            # backfill), no two batches that hold their range overlap. Single-column range
            # expressions only, so it needs no btree_gist and holds on pgserver's PostgreSQL too.
            ExclusionConstraint(
                name="batch_no_overlap_per_job_lane",
                expressions=[
                    (_point_range(F("job_id")), RangeOperators.OVERLAPS),
                    (_point_range(Coalesce(F("backfill_id"), Value(0))), RangeOperators.OVERLAPS),
                    (F("span"), RangeOperators.OVERLAPS),
                ],
                condition=Q(status__in=HOLDING_STATUSES),
            ),
        ]
        indexes = [
            models.Index(fields=["job", "status"], name="batch_job_status_idx"),
            # planning and watermark advance: "incremental batches of job J ending after position P"
            models.Index(
                F("job"),
                Func(F("span"), function="upper", output_field=models.BigIntegerField()),
                name="batch_incremental_upper_idx",
                condition=Q(backfill__isnull=True),
            ),
            # the next incremental start: "incremental batches of job J that left the holding
            # statuses (cancelled, superseded) ending after position P", the only places a hole
            # can be; tiny, since few batches ever leave
            models.Index(
                F("job"),
                Func(F("span"), function="upper", output_field=models.BigIntegerField()),
                name="batch_gone_upper_idx",
                condition=Q(backfill__isnull=True) & ~Q(status__in=HOLDING_STATUSES),
            ),
            # the reaper: "running batches whose lease expired", of all jobs (batches_reap_expired)
            # or of one (tidemark_reap_expired, in every acquire): the job is an index column, so
            # an acquire's search reads only the expired leases, never the entries its own recent
            # batches left behind until vacuum (they all hold leases in the future)
            models.Index(
                fields=["lease_expires_at", "job"],
                name="batch_running_lease_idx",
                condition=Q(status=BatchStatus.RUNNING),
            ),
            # acquire's "due incremental batch of job J, first in span order" (tidemark_acquire):
            # an index of its own, so the search never walks the job's other batches whatever the
            # statistics say (a fresh table's plan did); costs no write on the hot path, where
            # batches are born running and leave as succeeded
            models.Index(
                F("job"),
                Func(F("span"), function="lower", output_field=models.BigIntegerField()),
                name="batch_due_incremental_idx",
                condition=Q(
                    backfill__isnull=True, status__in=[BatchStatus.QUEUED, BatchStatus.FAILED]
                ),
            ),
            # tidemark_publish_begin and backfill planning: "outputs of job J still in the sink"
            models.Index(
                fields=["job"],
                name="batch_live_output_idx",
                condition=Q(published_attempt__isnull=False, replaced_by__isnull=True),
            ),
            # the overview and /metrics: "open batches by job and status" (selectors_health.job_rows,
            # job_blockers); small, since most batches are committed
            models.Index(
                fields=["status", "job"],
                name="batch_open_status_idx",
                condition=Q(
                    status__in=[
                        BatchStatus.QUEUED,
                        BatchStatus.RUNNING,
                        BatchStatus.FAILED,
                        BatchStatus.DEAD,
                    ]
                ),
            ),
            # the blocker of a job's watermark ("incremental batch of job J starting at P"), the
            # coverage strip and the gap report ("batches of job J starting before hi")
            models.Index(
                F("job"),
                Func(F("span"), function="lower", output_field=models.BigIntegerField()),
                name="batch_job_lower_idx",
            ),
            # the overview's last batch per job and the job page's batches filtered by status
            models.Index(fields=["job", "-id"], name="batch_job_recent_idx"),
            # the foreign keys' lookups (a backfill's batches, its due ones by status; deleting a
            # replacing batch), over the few rows that have one
            models.Index(
                fields=["backfill", "status"],
                name="batch_backfill_idx",
                condition=Q(backfill__isnull=False),
            ),
            models.Index(
                fields=["replaced_by"],
                name="batch_replaced_by_idx",
                condition=Q(replaced_by__isnull=False),
            ),
            # "succeeded batches of job J, newest first" (services/estimates.batch_seconds;
            # the last-day rates read JobHourlyRates now)
            models.Index(
                fields=["job", "finished_at"],
                name="batch_job_succeeded_idx",
                condition=Q(status=BatchStatus.SUCCEEDED),
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.pk} of {self.job.name} ({self.status})"

    @property
    def first_item(self) -> int:
        return self.span.lower

    @property
    def last_item(self) -> int:
        return self.span.upper - 1


class BatchAttempt(models.Model):
    """One start of a batch, kept for the batch's history."""

    # its index is attempt_batch_number_unique's (batch, number)
    batch = models.ForeignKey(
        Batch, on_delete=models.CASCADE, related_name="attempts", db_index=False
    )
    number = models.PositiveSmallIntegerField()
    worker = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, blank=True, default="")
    error = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["batch", "number"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "number"], name="attempt_batch_number_unique"),
        ]
        indexes = [
            # /metrics' attempt counters: "attempts finished since the rollup's boundary"
            # (selectors_alerts.attempt_counts)
            models.Index(
                fields=["finished_at"],
                name="attempt_finished_idx",
                condition=Q(finished_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of batch {self.batch_id}"

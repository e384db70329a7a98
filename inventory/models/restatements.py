"""Restatements: input already committed that changed, and each job's share of it."""

from django.db import models
from django.db.models import F, Q

from inventory.models.backfills import BackfillStatus
from inventory.models.jobs import Job


class RestatementCause(models.TextChoices):
    LATE_ROWS = "late_rows", "late rows in a table slice"
    CHANGED_FILES = "changed_files", "files changed after registration"
    CHANGED_OBJECTS = "changed_objects", "objects whose ETag changed"
    UPSTREAM = "upstream", "upstream commits replaced"
    DELTA_VERSIONS = "delta_versions", "Delta versions whose files a later version removed"
    HUDI_INSTANTS = "hudi_instants", "Hudi instants whose rows a later instant changed"
    ICEBERG_SNAPSHOTS = "iceberg_snapshots", "Iceberg snapshots whose rows a later one replaced"


class RestatementStatus(models.TextChoices):
    PENDING = "pending", "pending (a batch over the items is running)"
    PROPOSED = "proposed", "proposed (waits for an operator)"
    APPLIED = "applied", "applied (its backfill rebuilds the outputs)"
    DISMISSED = "dismissed", "dismissed"


class Restatement(models.Model):
    """Input a job already committed changed over [range_start, range_end] (item ids): what
    changed, why, and what was done about it. Written by services/restatements.py only."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="restatement_records")
    cause = models.CharField(max_length=20, choices=RestatementCause.choices)
    status = models.CharField(max_length=20, choices=RestatementStatus.choices)
    range_start = models.BigIntegerField()
    range_end = models.BigIntegerField()
    priority = models.SmallIntegerField(default=0)
    reason = models.TextField()
    detail = models.JSONField(
        default=dict, blank=True, help_text="the source of the restatement (items, commits)"
    )
    preview = models.JSONField(
        null=True, blank=True, help_text="the backfill plan proposed, with its fingerprint"
    )
    backfill = models.ForeignKey(
        "Backfill",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="restatements",
    )
    decided_by = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    dismiss_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(cause__in=RestatementCause.values), name="restatement_cause_valid"
            ),
            models.CheckConstraint(
                condition=Q(status__in=RestatementStatus.values), name="restatement_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(range_end__gte=F("range_start")), name="restatement_range_ordered"
            ),
            models.CheckConstraint(
                condition=~Q(status=RestatementStatus.DISMISSED) | ~Q(dismiss_reason=""),
                name="restatement_dismissed_has_reason",
            ),
        ]
        indexes = [
            # the job page, the API's list and the gap report: "restatements of job J, newest first"
            models.Index(fields=["job", "-id"], name="restatement_job_recent_idx"),
        ]

    def __str__(self) -> str:
        return (
            f"restatement {self.pk} of {self.job.name}, items {self.range_start}..{self.range_end}"
        )

    @property
    def state(self) -> str:
        """pending, proposed, dismissed, or for an applied one its backfill's progress:
        rebuilding, done, cancelled."""
        if self.status != RestatementStatus.APPLIED:
            return self.status
        backfill = self.backfill
        if backfill is None:
            return "applied"
        if backfill.status == BackfillStatus.COMPLETED:
            return "done"
        if backfill.status == BackfillStatus.CANCELLED:
            return "cancelled"
        return "rebuilding"

"""Backfills and the shared backfill throttle."""

from django.db import models
from django.db.models import F, Q

from inventory.models.connectors import Connector
from inventory.models.jobs import Job


class BackfillStatus(models.TextChoices):
    # born running (tidemark_backfill_transition: new -> running); moves: models/moves.py
    RUNNING = "running", "running"
    PAUSED = "paused", "paused"
    COMPLETED = "completed", "completed"
    CANCELLED = "cancelled", "cancelled"


class Backfill(models.Model):
    """A request to (re)process the closed id range [range_start, range_end] of a job."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="backfills")
    range_start = models.BigIntegerField()
    range_end = models.BigIntegerField()
    batch_weight = models.BigIntegerField()
    max_items = models.PositiveIntegerField()
    max_concurrency = models.PositiveSmallIntegerField(default=1)
    priority = models.SmallIntegerField(
        default=0, help_text="above 0 runs before incremental work, below 0 after it"
    )
    status = models.CharField(
        max_length=20, choices=BackfillStatus.choices, default=BackfillStatus.RUNNING
    )
    reason = models.TextField(blank=True, default="")
    # shown, never planned by: the ids above are what the backfill covers
    requested = models.JSONField(
        null=True,
        blank=True,
        help_text="the time (or column value) range the ids were resolved from: "
        '{"by", "basis", "start", "end"}; null when given by ids',
    )
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(range_end__gte=F("range_start")), name="backfill_range_ordered"
            ),
            models.CheckConstraint(
                condition=Q(batch_weight__gt=0), name="backfill_batch_weight_positive"
            ),
            models.CheckConstraint(
                condition=Q(status__in=BackfillStatus.values), name="backfill_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"backfill {self.pk} of {self.job.name}, items {self.range_start}..{self.range_end}"


class BackfillThrottle(models.Model):
    """A weight-per-minute budget that all running backfills draw from: global (no connector) or
    per connector. Backfill pacing dispatches a batch only while the weight of backfill batches
    started in the last minute leaves room for it."""

    connector = models.OneToOneField(
        Connector, on_delete=models.CASCADE, null=True, blank=True, related_name="throttle"
    )
    weight_per_minute = models.BigIntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["connector"], name="backfill_throttle_one_per_scope", nulls_distinct=False
            ),
            models.CheckConstraint(
                condition=Q(weight_per_minute__gt=0), name="backfill_throttle_positive"
            ),
        ]

    def __str__(self) -> str:
        scope = self.connector.name if self.connector_id else "all connectors"
        return f"{self.weight_per_minute}/min for {scope}"

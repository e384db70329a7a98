"""Watermarks and their events."""

from django.db import models
from django.db.models import Q

from inventory.models.batches import Batch
from inventory.models.jobs import Job, WatermarkType


class Watermark(models.Model):
    """How far a job has committed: `position` is the end of the contiguous committed id prefix,
    `value` the typed high-water mark (int, datetime ISO string, key -> int map, or file list)."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="watermark")
    type = models.CharField(max_length=20, choices=WatermarkType.choices)
    position = models.BigIntegerField()
    value = models.JSONField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # the count and weight of the job's connector's assets below `position` (their prefix sums),
    # kept by the database in the transaction that moves the position and when the assets below
    # it change (sql/schema/prefix_sums.sql: tidemark_watermark_done): the lag is the sums at the
    # connector's last asset minus these, with no probe of the assets per job (/metrics)
    done_count = models.BigIntegerField(db_default=0, editable=False)
    done_weight = models.DecimalField(max_digits=38, decimal_places=0, db_default=0, editable=False)

    class Meta:
        # one watermark per job: the OneToOneField's own unique constraint (job_id_key)
        constraints = [
            models.CheckConstraint(
                condition=Q(type__in=WatermarkType.values), name="watermark_type_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"watermark of {self.job.name}: {'—' if self.value is None else self.value}"


class WatermarkSource(models.TextChoices):
    BATCH = "batch", "batch"
    ADMIN = "admin", "admin"
    API = "api", "api"
    SYSTEM = "system", "system"


class WatermarkEvent(models.Model):
    """Every change of a watermark, with who and why."""

    # its index is wm_event_history_idx's (watermark, -id)
    watermark = models.ForeignKey(
        Watermark, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    old_position = models.BigIntegerField()
    new_position = models.BigIntegerField()
    old_value = models.JSONField(null=True, blank=True)
    new_value = models.JSONField(null=True, blank=True)
    source = models.CharField(max_length=20, choices=WatermarkSource.choices)
    batch = models.ForeignKey(Batch, on_delete=models.SET_NULL, null=True, blank=True)
    actor = models.CharField(max_length=150, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    is_replay = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["watermark", "-id"], name="wm_event_history_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.source} {_shown(self.old_value)} -> {_shown(self.new_value)}"


def _shown(value) -> str:
    """A watermark value as the admin names it: a dash for none yet."""
    return "—" if value is None else str(value)

"""Jobs: what they read, how they cut it into batches, their watermark's type and restatement
policy."""

from django.db import models
from django.db.models import Q

from inventory.models.connectors import Connector


class WatermarkType(models.TextChoices):
    INT = "int", "int"
    DATETIME = "datetime", "datetime"
    KEY_VALUE = "key_value", "key/value"
    FILE_SET = "file_set", "file set"


class RestatementPolicy(models.TextChoices):
    AUTOMATIC = "automatic", "automatic (rebuild at once)"
    PROPOSED = "proposed", "proposed (an operator applies it)"


class Job(models.Model):
    """What to do with a connector's data, and how much of it at a time."""

    name = models.SlugField(max_length=100)
    connector = models.ForeignKey(Connector, on_delete=models.PROTECT, related_name="jobs")
    processor = models.CharField(max_length=100, default="passthrough")
    params = models.JSONField(default=dict, blank=True)
    sink = models.JSONField(default=dict, blank=True)
    watermark_type = models.CharField(
        max_length=20, choices=WatermarkType.choices, default=WatermarkType.INT
    )
    batch_weight = models.BigIntegerField(help_text="weight budget of one batch")
    max_items = models.PositiveIntegerField(default=1000, help_text="item cap of one batch")
    max_attempts = models.PositiveSmallIntegerField(default=3)
    retry_backoff_seconds = models.PositiveIntegerField(default=30)
    lease_seconds = models.PositiveIntegerField(default=120)
    schedule_seconds = models.PositiveIntegerField(null=True, blank=True)
    schedule_cron = models.CharField(max_length=100, blank=True, default="")
    max_concurrency = models.PositiveSmallIntegerField(default=1)
    executor = models.CharField(max_length=20, default="warm")
    start_position = models.BigIntegerField(default=0, help_text="first item id this job considers")
    lookback = models.BigIntegerField(
        default=0,
        help_text="late data: every batch of a table source also re-reads this much before its "
        "range (seconds for a timestamp column, values for an integer column); the sink's upsert "
        "removes the duplicates",
    )
    restatements = models.CharField(
        max_length=20,
        choices=RestatementPolicy.choices,
        default=RestatementPolicy.AUTOMATIC,
        help_text="when input this job already committed changes: rebuild the affected outputs at "
        "once (automatic), or record a proposed replay for an operator to apply (proposed)",
    )
    # the freshness target: live work this far behind (or further) misses it, and backfills that
    # share the workers slow down until it is met again (docs/throttle.md)
    freshness_target_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="freshness target: the oldest item not committed yet is at most this old",
    )
    freshness_target_items = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="freshness target: at most this many items not committed yet",
    )
    paused = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="job_name_unique"),
            models.CheckConstraint(
                condition=Q(restatements__in=RestatementPolicy.values),
                name="job_restatements_valid",
            ),
            models.CheckConstraint(
                condition=Q(batch_weight__gt=0), name="job_batch_weight_positive"
            ),
            models.CheckConstraint(condition=Q(max_items__gt=0), name="job_max_items_positive"),
            models.CheckConstraint(
                condition=Q(max_attempts__gt=0), name="job_max_attempts_positive"
            ),
            models.CheckConstraint(
                condition=Q(watermark_type__in=WatermarkType.values),
                name="job_watermark_type_valid",
            ),
            models.CheckConstraint(
                condition=Q(freshness_target_seconds__isnull=True)
                | Q(freshness_target_seconds__gt=0),
                name="job_freshness_seconds_positive",
            ),
            models.CheckConstraint(
                condition=Q(freshness_target_items__isnull=True) | Q(freshness_target_items__gte=0),
                name="job_freshness_items_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.name

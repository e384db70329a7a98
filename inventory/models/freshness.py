"""The freshness controller's state (one row) and the record of its decisions."""

from django.db import models
from django.db.models import F, Q


class FreshnessThrottle(models.Model):
    """The backfills' shared limit that the freshness controller sets (services/freshness.py):
    a weight per throttle window for all backfills together and a cap on each backfill's running
    batches, on top of any BackfillThrottle budget and each backfill's own max_concurrency. One
    row (id 1); a person's `pinned_rate` replaces the controller's rate until removed."""

    enabled = models.BooleanField(
        default=True, help_text="adjust the backfills' rate to the live jobs' freshness targets"
    )
    rate = models.BigIntegerField(
        null=True, blank=True, help_text="weight per minute, all backfills; empty: no limit"
    )
    concurrency = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="running batches per backfill; empty: no cap"
    )
    reference_rate = models.BigIntegerField(
        null=True, blank=True, help_text="the backfills' weight per minute when last unthrottled"
    )
    pinned_rate = models.BigIntegerField(
        null=True, blank=True, help_text="a person's rate, weight per minute, used instead"
    )
    pinned_by = models.CharField(max_length=150, blank=True, default="")
    pinned_at = models.DateTimeField(null=True, blank=True)
    increase_fraction = models.FloatField(
        default=0.1, help_text="each step inside the targets adds this share of the reference"
    )
    decrease_factor = models.FloatField(
        default=0.5, help_text="each step with a target missed multiplies the rate by this"
    )
    floor_fraction = models.FloatField(
        default=0.05, help_text="the rate never goes below this share of the reference"
    )
    slow_above = models.FloatField(
        default=0.5, help_text="slow down once a live job uses more than this share of its target"
    )
    speed_below = models.FloatField(
        default=0.25, help_text="speed up only while every live job uses at most this share"
    )
    interval_seconds = models.PositiveIntegerField(
        default=10, help_text="the least time between two steps of the controller"
    )
    stepped_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="freshness_throttle_one_row"),
            models.CheckConstraint(
                condition=Q(rate__isnull=True) | Q(rate__gt=0), name="freshness_rate_positive"
            ),
            models.CheckConstraint(
                condition=Q(pinned_rate__isnull=True) | Q(pinned_rate__gt=0),
                name="freshness_pinned_rate_positive",
            ),
            models.CheckConstraint(
                condition=Q(concurrency__isnull=True) | Q(concurrency__gt=0),
                name="freshness_concurrency_positive",
            ),
            models.CheckConstraint(
                condition=Q(increase_fraction__gt=0)
                & Q(decrease_factor__gt=0)
                & Q(decrease_factor__lt=1)
                & Q(floor_fraction__gte=0)
                & Q(floor_fraction__lt=1)
                & Q(speed_below__gt=0)
                & Q(slow_above__gte=F("speed_below"))
                & Q(slow_above__lte=1),
                name="freshness_factors_valid",
            ),
        ]

    def __str__(self) -> str:
        if self.pinned_rate is not None:
            return f"pinned at {self.pinned_rate}/min"
        return "no limit" if self.rate is None else f"{self.rate}/min"


class ThrottleDecision(models.Model):
    """One step of the freshness controller (or a person's pin) that changed the limit."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    old_rate = models.BigIntegerField(null=True, blank=True)
    new_rate = models.BigIntegerField(null=True, blank=True)
    old_concurrency = models.PositiveSmallIntegerField(null=True, blank=True)
    new_concurrency = models.PositiveSmallIntegerField(null=True, blank=True)
    reason = models.TextField()
    missing = models.JSONField(default=list, blank=True, help_text="jobs missing their target")

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S}: {self.reason}"

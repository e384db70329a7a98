"""The retention-breach forecast of each job whose source forgets data, refreshed by beat
(services/retention_forecast.py) and read by the job page, the alert strip, the API, the CLI and
/metrics."""

from django.db import models

from inventory.models.jobs import Job


class ForecastVerdict(models.TextChoices):
    SAFE = "safe", "safe: catching up faster than retention advances"
    AT_RISK = "at_risk", "will start losing data at the current rates"
    LOST = "lost", "already needs data the source deleted"
    NO_LOSS = "no_loss", "no loss within the forecast's horizon"
    UNKNOWN = "unknown", "the source could not be probed"


class RetentionForecast(models.Model):
    """One row per job whose source has a retention: the last forecast, when it was made, what it
    read (`inputs`: the retention, positions and rates) and, when the probe failed, why."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="retention_forecast")
    verdict = models.CharField(max_length=10, choices=ForecastVerdict.choices)
    # seconds from computed_at until the first loss (0 when lost; null when none is forecast)
    margin_seconds = models.FloatField(null=True, blank=True)
    loss_at = models.DateTimeField(null=True, blank=True)
    message = models.TextField()
    inputs = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(verdict__in=[choice.value for choice in ForecastVerdict]),
                name="retention_forecast_verdict_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(margin_seconds__isnull=True) | models.Q(margin_seconds__gte=0),
                name="retention_forecast_margin_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job.name}: {self.message}"

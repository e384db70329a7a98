"""Rows the database derives (attempt rollups, a job's hourly rates) and the maintenance runs'
record."""

from django.db import models

from inventory.models.jobs import Job


class AttemptRollup(models.Model):
    """Attempt counts per job and outcome: "" counts the attempts started, with an id below
    `MaintenanceRun("attempt-rollup").outcome["below_id"]`; an outcome counts the attempts that
    finished with it before `outcome["finished_before"]` (a finished attempt no longer changes).
    /metrics adds the few attempts at or after these boundaries instead of counting every attempt
    on each scrape, so the sum is exact (services/metrics_rollup.py)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    outcome = models.CharField(max_length=20, blank=True, default="")
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "outcome"], name="attempt_rollup_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.job.name} {self.outcome or 'started'}: {self.count}"


class JobHourlyRates(models.Model):
    """Attempts finished per job and clock hour (UTC): succeeded and failed, and the items and
    weight of the succeeded ones. Kept by a trigger on the attempt that finishes, in the commit or
    failure transaction (sql/schema/rates.sql), so the dashboard's last-day rates read at most 24
    rows per job instead of counting batches; a job's rows older than two days go when it starts
    a new hour."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    succeeded = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    items = models.BigIntegerField(default=0)
    weight = models.DecimalField(max_digits=38, decimal_places=0, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "hour"], name="job_hourly_rates_unique"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.job.name} {self.hour:%Y-%m-%d %H}h: {self.succeeded} ok, {self.failed} failed"
        )


class MaintenanceRun(models.Model):
    """When a periodic step (the lease reaper, ...) last ran, by the database's clock, so the
    dashboard and /metrics can show a step that is overdue (no beat, no worker)."""

    name = models.CharField(primary_key=True, max_length=100)
    last_run_at = models.DateTimeField()
    outcome = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.last_run_at}"

"""Prometheus metrics, read from the database at scrape time.

Counts come from the inventory itself (batches, attempts, watermarks), not from counters in one
process's memory, so every web, worker and beat process contributes and a restart loses nothing.
"""

import hmac

from django.conf import settings
from django.db.models import Count
from django.http import HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from inventory import selectors
from inventory.models import BatchAttempt, Job
from inventory.roles import VIEWER, has_role


class InventoryCollector:
    def collect(self):
        batches = GaugeMetricFamily(
            "tidemark_batches", "Batches by job, kind and status", labels=["job", "kind", "status"]
        )
        for job, kind, status, count in selectors.batch_counts_by_job():
            batches.add_metric([job, kind, status], count)
        yield batches

        started = CounterMetricFamily(
            "tidemark_batch_attempts_started",
            "Batch attempts started (acquired by a worker or an API client)",
            labels=["job"],
        )
        finished = CounterMetricFamily(
            "tidemark_batch_attempts_finished",
            "Batch attempts finished, by outcome (succeeded / failed)",
            labels=["job", "outcome"],
        )
        rows = (
            BatchAttempt.objects.values_list("batch__job__name", "outcome")
            .annotate(n=Count("id"))
            .order_by()
        )
        started_by_job: dict[str, int] = {}
        for job, outcome, count in rows:
            started_by_job[job] = started_by_job.get(job, 0) + count
            if outcome:
                finished.add_metric([job, outcome], count)
        for job, count in sorted(started_by_job.items()):
            started.add_metric([job], count)
        yield started
        yield finished

        position = GaugeMetricFamily(
            "tidemark_watermark_position",
            "End of the job's contiguous committed item-id prefix",
            labels=["job"],
        )
        lag_items = GaugeMetricFamily(
            "tidemark_lag_items", "Items at or after the watermark", labels=["job"]
        )
        lag_weight = GaugeMetricFamily(
            "tidemark_lag_weight",
            "Summed weight of the items at or after the watermark",
            labels=["job"],
        )
        blocked = GaugeMetricFamily(
            "tidemark_watermark_blocked",
            "1 when the watermark waits for a dead batch (needs retry or skip)",
            labels=["job"],
        )
        updated = GaugeMetricFamily(
            "tidemark_watermark_updated_timestamp_seconds",
            "When the watermark last moved",
            labels=["job"],
        )
        for job in Job.objects.select_related("connector", "watermark").order_by("name"):
            lag = selectors.job_lag(job=job)
            blocker = selectors.job_blocker(job=job)
            position.add_metric([job.name], job.watermark.position)
            if lag is not None:
                lag_items.add_metric([job.name], lag.items)
                lag_weight.add_metric([job.name], lag.weight)
            blocked.add_metric([job.name], int(blocker is not None and blocker.status == "dead"))
            updated.add_metric([job.name], job.watermark.updated_at.timestamp())
        yield from (position, lag_items, lag_weight, blocked, updated)

        reaper = selectors.reaper_status()
        last_run = GaugeMetricFamily(
            "tidemark_reaper_last_run_timestamp_seconds",
            "When the lease reaper last ran (absent: never)",
        )
        if reaper.last_run_at is not None:
            last_run.add_metric([], reaper.last_run_at.timestamp())
        yield last_run
        yield GaugeMetricFamily(
            "tidemark_reaper_overdue",
            "1 when the lease reaper has not run for longer than it should (is beat running? "
            "a worker?): batches of dead workers stay running until it does",
            value=int(reaper.overdue),
        )


_registry = CollectorRegistry(auto_describe=False)
_registry.register(InventoryCollector())


def _authorized(request) -> bool:
    header = request.headers.get("Authorization", "")
    token = settings.METRICS_TOKEN
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[len("Bearer ") :].encode(), token.encode())
    if header.startswith("Token "):
        try:
            user_auth = TokenAuthentication().authenticate(request)
        except AuthenticationFailed:
            return False
        return user_auth is not None and has_role(user_auth[0], VIEWER)
    return has_role(request.user, VIEWER)


def metrics_view(request):
    if not _authorized(request):
        response = HttpResponse("authentication required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="tidemark metrics"'
        return response
    return HttpResponse(generate_latest(_registry), content_type=CONTENT_TYPE_LATEST)

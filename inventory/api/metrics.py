"""Prometheus metrics, read from the database at scrape time.

Counts come from the inventory itself (batches, attempts, watermarks), not from counters in one
process's memory, so every web, worker and beat process contributes and a restart loses nothing.
"""

import gc
import hmac
import math
import threading
import time
from contextlib import contextmanager
from datetime import UTC

from django.conf import settings
from django.http import HttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from prometheus_client import CONTENT_TYPE_LATEST
from rest_framework.exceptions import AuthenticationFailed, Throttled

from inventory import selectors, selectors_alerts, selectors_health
from inventory.api.authentication import (
    METRICS_USERNAME,
    ThrottledTokenAuthentication,
    guess_failure_record,
    guess_refused_check,
)
from inventory.api.exposition import Family, label_value, number, render
from inventory.models import RetentionForecast
from inventory.roles import VIEWER, has_role

# The per-job families written whatever TIDEMARK_METRICS_PER_JOB says: at most five samples a job
# (lag items, lag seconds for datetime watermarks, the last watermark move, failed and dead
# batches where there are any), so that 10,000 jobs stay under the 50,000 samples a scrape is
# commonly allowed. Every other family is summed over the jobs unless the setting is `full`.
PER_JOB_FAMILIES = (
    "tidemark_lag_items",
    "tidemark_lag_seconds",
    "tidemark_watermark_updated_timestamp_seconds",
    "tidemark_job_open_batches",
    "tidemark_retention_margin_seconds",
)
# the families that `full` adds, one sample (or one per kind and status) a job each, and one per
# alerting job, connector or backfill (the default counts the alerts by kind in tidemark_alerts)
FULL_ONLY_FAMILIES = (
    "tidemark_watermark_position",
    "tidemark_lag_weight",
    "tidemark_watermark_blocked",
    "tidemark_alert",
)


class InventoryCollector:
    """A fixed number of queries per scrape, whatever the number of jobs and batches (plus one
    lag query per job reading an external meta table).

    The jobs are read by one statement, one row per job with only what the families write
    (dashboard.sql: health_metrics), and their samples written as text lines in one pass over
    those rows (exposition.Family.lines): no object per job, no tuple per sample."""

    def collect(self, *, full: bool | None = None):
        if full is None:
            full = settings.METRICS_PER_JOB == "full"
        health = selectors_health.Health()
        rows = health.fetch("health_metrics", full=full)

        lag_items = Family("tidemark_lag_items", "Items at or after the watermark", labels=["job"])
        lag_seconds = Family(
            "tidemark_lag_seconds",
            "For datetime watermarks: how far the watermark's source time is behind now",
            labels=["job"],
        )
        updated = Family(
            "tidemark_watermark_updated_timestamp_seconds",
            "When the watermark last moved",
            labels=["job"],
        )
        stuck = Family(
            "tidemark_job_open_batches",
            "A job's failed (retrying) and dead (waiting for a person) batches, where it has any",
            labels=["job", "status"],
        )
        position = Family(
            "tidemark_watermark_position",
            "End of the job's contiguous committed item-id prefix",
            labels=["job"],
        )
        lag_weight = Family(
            "tidemark_lag_weight",
            "Summed weight of the items at or after the watermark",
            labels=["job"],
        )
        blocked = Family(
            "tidemark_watermark_blocked",
            "1 when the watermark waits for a dead batch (needs retry or skip)",
            labels=["job"],
        )
        kinds = selectors_health.OPEN_BY_KIND
        by_job_kind = []  # (job name, open batches in OPEN_BY_KIND's order), under `full`

        open_totals = [0] * len(kinds)
        by_state = dict.fromkeys(selectors_health.STATES, 0)
        # the jobs with dead batches and with a late watermark: counted (tidemark_alerts), and
        # named, in order, only under `full` (tidemark_alert: a sample each)
        dead_jobs, late_jobs = [], []
        n_dead_jobs = n_late_jobs = 0
        items_lines, seconds_lines, updated_lines = (
            lag_items.lines,
            lag_seconds.lines,
            updated.lines,
        )
        stuck_lines = stuck.lines
        now = timezone.now()
        for (
            name,
            state,
            n_failed,
            n_dead,
            late,
            items,
            weight,
            value,
            moved,
            at,
            held,
            open_by_kind,
        ) in rows:
            if name is None:  # the first row: the open batches of all jobs by kind and status
                open_totals = open_by_kind or [0] * len(kinds)
                continue
            by_state[state] += 1
            job = label_value(name)
            if items is not None:
                items_lines.append(f'tidemark_lag_items{{job="{job}"}} {number(items)}\n')
            if value is not None:
                behind = _time_lag(value, now)
                if behind is not None:
                    seconds_lines.append(f'tidemark_lag_seconds{{job="{job}"}} {number(behind)}\n')
            updated_lines.append(
                f'tidemark_watermark_updated_timestamp_seconds{{job="{job}"}} {number(moved)}\n'
            )
            if n_failed:
                stuck_lines.append(
                    f'tidemark_job_open_batches{{job="{job}",status="failed"}} {number(n_failed)}\n'
                )
            if n_dead:
                n_dead_jobs += 1
                stuck_lines.append(
                    f'tidemark_job_open_batches{{job="{job}",status="dead"}} {number(n_dead)}\n'
                )
            if late:
                n_late_jobs += 1
            if full:
                if n_dead:
                    dead_jobs.append(name)
                if late:
                    late_jobs.append(name)
                position.add([name], at)
                if items is not None:
                    lag_weight.add([name], int(weight or 0))
                blocked.add([name], int(held))
                if open_by_kind:
                    by_job_kind.append((name, open_by_kind))

        states = Family(
            "tidemark_jobs",
            "Jobs by the state the overview shows (blocked, late, failing, unreadable, "
            "connector, paused, catching_up, current; 0 when none)",
            labels=["state"],
        )
        states.samples = [((state,), count) for state, count in by_state.items()]
        yield states

        if full:
            batches = Family(
                "tidemark_batches",
                "Open batches (queued, running, failed, dead) by job, kind and status",
                labels=["job", "kind", "status"],
            )
            batches.samples = [
                ((name, *kinds[i]), count)
                for name, counts in by_job_kind
                for i, count in enumerate(counts)
                if count
            ]
        else:
            batches = Family(
                "tidemark_batches",
                "Open batches (queued, running, failed, dead) of all jobs by kind and status",
                labels=["kind", "status"],
            )
            batches.samples = [(kinds[i], int(count or 0)) for i, count in enumerate(open_totals)]
        yield batches

        per_job = ["job"] if full else []
        started = Family(
            "tidemark_batch_attempts_started",
            "Batch attempts started (acquired by a worker or an API client)",
            labels=per_job,
            type="counter",
        )
        finished = Family(
            "tidemark_batch_attempts_finished",
            "Batch attempts finished, by outcome (succeeded / failed)",
            labels=[*per_job, "outcome"],
            type="counter",
        )
        if full:
            names = selectors_alerts.job_names()
            for job_id, outcome, count in sorted(selectors_alerts.attempt_counts()):
                if job_id not in names:
                    continue
                if outcome:
                    finished.add([names[job_id], outcome], count)
                else:
                    started.add([names[job_id]], count)
        else:
            summed: dict[str, int] = {"": 0, "failed": 0, "succeeded": 0}
            for outcome, count in selectors_alerts.attempt_totals():
                summed[outcome] = summed.get(outcome, 0) + count
            started.add([], summed.pop(""))
            for outcome in sorted(summed):
                finished.add([outcome], summed[outcome])
        yield started
        yield finished

        yield from (lag_items, lag_seconds, updated, stuck)
        margin = Family(
            "tidemark_retention_margin_seconds",
            "Seconds until the job starts losing data to its source's retention at the current "
            "rates (0: losing now), where a loss is forecast (beat's last retention forecast)",
            labels=["job"],
        )
        for name, seconds in RetentionForecast.objects.filter(
            margin_seconds__isnull=False
        ).values_list("job__name", "margin_seconds"):
            margin.add([name], seconds)
        yield margin
        if full:
            yield from (position, lag_weight, blocked)

        reaper = selectors.reaper_status()
        last_run = Family(
            "tidemark_reaper_last_run_timestamp_seconds",
            "When the lease reaper last ran (absent: never)",
        )
        if reaper.last_run_at is not None:
            last_run.add([], reaper.last_run_at.timestamp())
        yield last_run
        overdue = Family(
            "tidemark_reaper_overdue",
            "1 when the lease reaper has not run for longer than it should (is beat running? "
            "a worker?): batches of dead workers stay running until it does",
        )
        overdue.add([], int(reaper.overdue))
        yield overdue

        # by default the job alerts are only counted: no label tuple per alerting job (at 10,000
        # blocked jobs, 10,000 tuples built to be counted)
        alerts = selectors_alerts.job_alert_labels(dead_jobs, late_jobs)
        by_kind = Family(
            "tidemark_alerts",
            "Active alerts by kind and severity (the dashboard's alert strip, GET "
            "/api/v1/alerts/; 0 when none)",
            labels=["kind", "severity"],
        )
        counted = _alert_counts(alerts)
        if not full:
            for kind, n in (("dead_batches", n_dead_jobs), ("watermark_late", n_late_jobs)):
                counted[kind, selectors_alerts.SEVERITY[kind]] += n
        by_kind.samples = [(labels, count) for labels, count in counted.items()]
        yield by_kind
        if full:
            # one sample per alerting job (and connector, backfill): 10,000 blocked jobs would
            # be 10,000 samples, so only under `full`
            active = Family(
                "tidemark_alert",
                "1 for each active alert (the dashboard's alert strip, GET /api/v1/alerts/): "
                "kind is dead_batches, schedule_invalid, watermark_late, connector_waiting, "
                "reaper_overdue or backfill_stalled; subject the job, connector or backfill",
                labels=["kind", "subject", "severity"],
            )
            active.samples = [(labels, 1) for labels in alerts]
            yield active


def _time_lag(value: str, now) -> float | None:
    """A datetime watermark's value (its JSON string's text): seconds behind `now`, none when it
    does not read as a datetime (selectors_health.time_lag's rule)."""
    try:
        moment = parse_datetime(value)
    except ValueError:
        return None
    if moment is None:
        return None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    return max((now - moment).total_seconds(), 0.0)


def _alert_counts(alerts: list[tuple[str, str, str]]) -> dict[tuple[str, str], int]:
    """(kind, severity) -> active alerts: every kind with its severity (0 when none), in
    ALERT_KINDS' order, then any other pair an alert carries."""
    counts = {(kind, selectors_alerts.SEVERITY[kind]): 0 for kind in selectors_alerts.ALERT_KINDS}
    for kind, _subject, severity in alerts:
        counts[kind, severity] = counts.get((kind, severity), 0) + 1
    return counts


_collector = InventoryCollector()

# The exposition is reused for METRICS_CACHE_SECONDS (settings; 0: render on every scrape) by the
# scrapes of one process: Prometheus scrapes every 15-60 s, so a few seconds old is what it would
# have read had it come a moment earlier, and several scrapers (an HA pair, a person with curl)
# share one render. One render at a time: the others wait for it rather than render too.
_cache = {"at": float("-inf"), "body": b""}
_cache_lock = threading.Lock()


@contextmanager
def _cycle_collector_paused():
    """A render makes a string per sample (at most five samples per job) and a row tuple per job,
    which live until the body is written and form no cycles: reference counting frees them. Left on, the cyclic
    collector walks the whole process heap for them several times per render (measured at 10,000
    jobs: 130-230 ms of a 0.9 s render; at 1,000 jobs 40 ms every second or third render)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def exposition() -> bytes:
    ttl = settings.METRICS_CACHE_SECONDS
    with _cache_lock:
        if ttl <= 0 or time.monotonic() - _cache["at"] >= ttl:
            with _cycle_collector_paused():
                _cache["body"] = render(_collector.collect())
            _cache["at"] = time.monotonic()
        return _cache["body"]


def _authorized(request) -> bool:
    header = request.headers.get("Authorization", "")
    if header.split(" ", 1)[0].lower() == "bearer":
        # counted and throttled with the API's bad tokens, per address (authentication.py):
        # past the limit, 429 whatever the bearer, so a guess cannot be told from a hit
        address = guess_refused_check(request)
        token = settings.METRICS_TOKEN
        offered = header.split(" ", 1)[1] if " " in header else ""
        if token and hmac.compare_digest(offered.encode(), token.encode()):
            return True
        guess_failure_record(request, address, username=METRICS_USERNAME)
        return False
    if header.startswith("Token "):
        try:
            user_auth = ThrottledTokenAuthentication().authenticate(request)
        except AuthenticationFailed:
            return False
        return user_auth is not None and has_role(user_auth[0], VIEWER)
    return has_role(request.user, VIEWER)


def metrics_view(request):
    try:
        authorized = _authorized(request)
    except Throttled as refused:
        response = HttpResponse("too many bad tokens\n", status=429, content_type="text/plain")
        if refused.wait:
            response["Retry-After"] = str(math.ceil(refused.wait))  # as the API's 429s say it
        return response
    if not authorized:
        if request.user.is_authenticated:
            # logged in, but in no role: known, and not allowed
            return HttpResponse(
                "this needs the viewer role\n", status=403, content_type="text/plain"
            )
        response = HttpResponse("authentication required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="tidemark metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)

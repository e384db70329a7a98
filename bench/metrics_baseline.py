"""The baseline of bench_dashboard.py's /metrics figures: the default families as /metrics
collected them before health_metrics (up to 535b40e), kept here to be timed in the same run as
the collector of inventory/api/metrics.py. Every job read as a selectors_health.JobRow
(dashboard.sql: health_all), the attempts per job summed in Python, each sample a tuple in a
Family, written by the same exposition.render: the same sample lines
(the help texts here are short: the same sample lines, a few hundred bytes less)."""

from inventory import selectors, selectors_alerts, selectors_health
from inventory.api.exposition import Family
from inventory.api.metrics import _alert_counts


def collect_before():
    jobs = selectors_health.Health().rows()
    names = {job.pk: job.name for job in jobs}
    states = Family("tidemark_jobs", "Jobs by state", labels=["state"])
    by_state = dict.fromkeys(selectors_health.STATES, 0)
    for job in jobs:
        by_state[job.state] += 1
    states.samples = [((state,), n) for state, n in by_state.items()]
    yield states

    kinds = selectors_health.OPEN_BY_KIND
    batches = Family("tidemark_batches", "Open batches", labels=["kind", "status"])
    totals = [0] * len(kinds)
    for job in jobs:
        for i, n in enumerate(job.open_by_kind):
            if n:
                totals[i] += n
    batches.samples = [(kinds[i], n) for i, n in enumerate(totals)]
    yield batches

    started = Family("tidemark_batch_attempts_started", "Started", type="counter")
    finished = Family(
        "tidemark_batch_attempts_finished", "Finished", labels=["outcome"], type="counter"
    )
    summed = {"": 0, "failed": 0, "succeeded": 0}
    for job_id, outcome, n in selectors_alerts.attempt_counts():
        if job_id in names:
            summed[outcome or ""] = summed.get(outcome or "", 0) + n
    started.add([], summed.pop(""))
    for outcome in sorted(summed):
        finished.add([outcome], summed[outcome])
    yield started
    yield finished

    one = [(job, (job.name,)) for job in jobs]
    lag_items = Family("tidemark_lag_items", "Lag", labels=["job"])
    lag_seconds = Family("tidemark_lag_seconds", "Lag in seconds", labels=["job"])
    updated = Family("tidemark_watermark_updated_timestamp_seconds", "Moved", labels=["job"])
    stuck = Family("tidemark_job_open_batches", "Stuck", labels=["job", "status"])
    lag_items.samples = [(name, job.lag.items) for job, name in one if job.lag is not None]
    lag_seconds.samples = [
        (name, job.time_lag.total_seconds()) for job, name in one if job.time_lag is not None
    ]
    updated.samples = [(name, job.watermark.updated_at.timestamp()) for job, name in one]
    stuck.samples = [
        ((job.name, status), n)
        for job in jobs
        if job.n_failed or job.n_dead
        for status, n in (("failed", job.n_failed), ("dead", job.n_dead))
        if n
    ]
    yield from (lag_items, lag_seconds, updated, stuck)

    reaper = selectors.reaper_status()
    last_run = Family("tidemark_reaper_last_run_timestamp_seconds", "Reaper")
    if reaper.last_run_at is not None:
        last_run.add([], reaper.last_run_at.timestamp())
    yield last_run
    overdue = Family("tidemark_reaper_overdue", "Overdue")
    overdue.add([], int(reaper.overdue))
    yield overdue
    alerts = Family("tidemark_alerts", "Alerts", labels=["kind", "severity"])
    counted = _alert_counts(selectors_alerts.alert_labels(jobs))
    alerts.samples = list(counted.items())
    yield alerts

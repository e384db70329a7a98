"""Deleting a job or a connector from the dashboard (admin): a confirmation page that says what goes
with it and what stays, then the same service as the API's DELETE and `tidemark jobs delete`.

The service refuses a job while one of its batches runs (cancel it or let it finish first) and a
connector that jobs still read; the page says so before anyone presses the button, and the POST is
refused the same way if that changed meanwhile (the message is shown on the page).
"""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render

from inventory import selectors
from inventory.actions import role_of, run
from inventory.models import BatchStatus, Connector, Job
from inventory.services.errors import TidemarkError
from inventory.services.secrets import mask
from inventory.sources.job_output import downstream_connectors
from inventory.views.base import page_context, role_required

JOBS_NAMED = 20  # the jobs a connector's delete page names (the rest: counted and linked)


@role_required(role_of("job.delete"))
def job_delete(request, name):
    job = get_object_or_404(Job.objects.select_related("connector", "watermark"), name=name)
    error = None
    if request.method == "POST":
        try:
            run("job.delete", request.user, job=job)
        except TidemarkError as exc:
            error = str(exc)
        else:
            messages.success(request, f"Job {name} deleted with its batches and watermark history.")
            return redirect("dashboard:overview")
    counts = {s: n for s, n in selectors.job_batch_counts(job=job).items() if n}
    readers = list(downstream_connectors(job).values_list("name", flat=True))
    context = {
        "noun": "job",
        "obj": job,
        "error": error,
        "counts": counts,
        "batches": sum(counts.values()),
        "events": job.watermark.events.count() if hasattr(job, "watermark") else 0,
        "sink": mask(job.sink or {}),
        "running": counts.get(BatchStatus.RUNNING, 0),
        "readers": readers,
        **page_context(request),
    }
    return render(request, "inventory/delete_confirm.html", context, status=409 if error else 200)


@role_required(role_of("connector.delete"))
def connector_delete(request, name):
    connector = get_object_or_404(Connector, name=name)
    error = None
    if request.method == "POST":
        try:
            run("connector.delete", request.user, connector=connector)
        except TidemarkError as exc:
            error = str(exc)
        else:
            messages.success(request, f"Connector {name} deleted with its registered items.")
            return redirect("dashboard:connectors")
    # a few of the jobs that still read it, named, and their count (the overview filtered to the
    # connector lists them all, a page at a time): a connector may have thousands
    job_count, jobs = selectors.connector_jobs_head(connector=connector, limit=JOBS_NAMED)
    context = {
        "noun": "connector",
        "obj": connector,
        "error": error,
        "jobs": jobs,
        "job_count": job_count,
        "jobs_more": job_count - len(jobs),
        "items": selectors.connector_item_count(connector=connector),
        **page_context(request),
    }
    return render(request, "inventory/delete_confirm.html", context, status=409 if error else 200)

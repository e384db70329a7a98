"""A job's page: its batches, coverage, holes and restatements; run now, pause, resume, backfill its
holes."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from inventory import selectors, selectors_coverage, selectors_freshness, selectors_health
from inventory.actions import role_of, run
from inventory.forms import GapRangeForm, HolesBackfillForm
from inventory.models import Batch, BatchKind, BatchStatus, Job, RetentionForecast
from inventory.roles import VIEWER, actor_name
from inventory.services import gaps as gap_services
from inventory.services.errors import TidemarkError
from inventory.services.secrets import mask
from inventory.views.base import act, page_context, require_allowed, role_required

BATCH_PAGE = 25


@require_GET
@role_required(VIEWER)
def job_detail(request, name):
    job = get_object_or_404(Job.objects.select_related("connector", "watermark"), name=name)
    history = list(selectors.watermark_history(job=job)[:200])
    counts = selectors.job_batch_counts(job=job)
    coverage = selectors_coverage.job_coverage(job=job)
    restatements = list(selectors_coverage.job_restatements(job=job)[:RESTATEMENTS_SHOWN])
    rates = selectors_health.jobs_rates(job.pk).get(job.pk) or selectors_health.JobRates()
    lag = selectors.job_lag(job=job)
    skipped = selectors_coverage.job_skipped(job=job)
    context = {
        "job": job,
        "lag": lag,
        "skipped_items": sum(r.items for r in skipped),
        "time_lag": selectors_health.time_lag(job),
        "eta": selectors_health.eta(lag.items if lag else None, rates),
        "freshness": selectors_freshness.job_freshness(job=job),
        "rates": rates,
        "blocker": selectors.job_blocker(job=job),
        "retention": RetentionForecast.objects.filter(job=job).first(),
        "counts": counts,
        "coverage": coverage,
        **_restated_context(coverage, restatements),
        "history": history,
        "history_points": selectors.watermark_chart_points(job=job, events=history),
        "config": mask(
            {
                "processor": job.processor,
                "params": job.params,
                "sink": job.sink,
                "batch_weight": job.batch_weight,
                "max_items": job.max_items,
                "max_attempts": job.max_attempts,
                "retry_backoff_seconds": job.retry_backoff_seconds,
                "lease_seconds": job.lease_seconds,
                "schedule_seconds": job.schedule_seconds,
                "schedule_cron": job.schedule_cron,
                "max_concurrency": job.max_concurrency,
                "executor": job.executor,
                "start_position": job.start_position,
                "restatements": job.restatements,
            }
        ),
        **_batches_context(request, job, counts),
        **page_context(request),
    }
    return render(request, "inventory/job_detail.html", context)


RESTATEMENTS_SHOWN = 50


def _restated_context(coverage, restatements) -> dict:
    """Restated ranges beside the coverage strip's holes, and the job's restatements listed."""
    restated = selectors_coverage.restated_strip(coverage, restatements)
    return {
        "restatements": restatements,
        "restated": restated,
        "restated_states": sorted({r["state"] for r in restated}),
    }


def _batches_context(request, job, counts) -> dict:
    status = request.GET.get("status", "")
    kind = request.GET.get("kind", "")
    batches = Batch.objects.filter(job=job)
    if status in BatchStatus.values:
        batches = batches.filter(status=status)
    if kind in BatchKind.values:
        batches = batches.filter(kind=kind)
    page = Paginator(batches.order_by("-id"), BATCH_PAGE).get_page(request.GET.get("page"))
    bounds = selectors.batches_item_bounds(job=job, batches=page.object_list)
    for batch in page.object_list:
        batch.items_bounds = bounds.get(batch.pk)
    return {
        "batches": page,
        "status_filter": status,
        "kind_filter": kind,
        "statuses": BatchStatus.values,
        "kinds": BatchKind.values,
        # htmx polls the table only while something can still change
        "live": bool(counts.get(BatchStatus.RUNNING) or counts.get(BatchStatus.QUEUED)),
    }


@require_GET
@role_required(VIEWER)
def job_batches_partial(request, name):
    job = get_object_or_404(Job, name=name)
    context = {"job": job, **_batches_context(request, job, selectors.job_batch_counts(job=job))}
    return render(request, "inventory/_batches_table.html", context)


@require_GET
@role_required(VIEWER)
def job_gaps(request, name):
    job = get_object_or_404(Job.objects.select_related("connector", "watermark"), name=name)
    form = GapRangeForm(request.GET or None)
    bounds = form.cleaned_data if form.is_valid() else {}
    bounds = {k: v for k, v in bounds.items() if v is not None}
    coverage = selectors_coverage.job_coverage(job=job, **bounds)
    gaps = [
        seg
        for seg in coverage.segments
        if seg.state in selectors_coverage.GAP_STATES and seg.items > 0
    ]
    restatements = list(selectors_coverage.job_restatements(job=job, **bounds)[:RESTATEMENTS_SHOWN])
    context = {
        "job": job,
        "form": form,
        "coverage": coverage,
        **_restated_context(coverage, restatements),
        "gaps": gaps,
        "holes": selectors_coverage.holes_to_backfill(gaps),
        "skipped": selectors_coverage.job_skipped(job=job, **bounds),
        "bounds": bounds,
        **page_context(request),
    }
    return render(request, "inventory/job_gaps.html", context)


@require_POST
@role_required(role_of("job.backfill_holes"))
def job_gaps_backfill(request, name):
    job = get_object_or_404(Job.objects.select_related("connector", "watermark"), name=name)
    form = HolesBackfillForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Invalid input: {form.errors.as_text()}")
        return redirect("dashboard:job-gaps", name=job.name)
    data = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}
    preview = data.pop("preview", False)
    if preview:
        try:
            plans = gap_services.holes_preview(
                job=job,
                **{
                    k: data[k] for k in ("lower", "upper", "batch_weight", "max_items") if k in data
                },
            )
        except TidemarkError as exc:
            return render(request, "inventory/_holes_preview.html", {"error": str(exc)})
        context = {
            "plans": plans,
            "job": job,
            "fingerprint": gap_services.holes_fingerprint(job=job, plans=plans),
        }
        return render(request, "inventory/_holes_preview.html", context)
    try:
        created = run(
            "job.backfill_holes", request.user, job=job, **data, actor=actor_name(request.user)
        )
    except TidemarkError as exc:  # the holes changed since the preview, among others: say how
        messages.error(request, str(exc))
        return redirect("dashboard:job-gaps", name=job.name)
    messages.success(
        request,
        "Scheduled "
        + ", ".join(f"backfill {b.pk} [{b.range_start}, {b.range_end}]" for b in created),
    )
    return redirect("dashboard:backfills")


@require_POST
@role_required(role_of("job.run"))
def job_run_now(request, name):
    job = get_object_or_404(Job.objects.select_related("connector"), name=name)
    try:
        outcome = run("job.run", request.user, job=job)
    except TidemarkError as exc:
        messages.error(request, str(exc))
        return redirect("dashboard:job", name=job.name)
    if outcome.reason:
        messages.warning(request, f"Nothing planned: {outcome.reason}")
    else:
        messages.success(
            request,
            f"Planned {len(outcome.planned)} batch(es), dispatched {len(outcome.dispatched)}.",
        )
    return redirect("dashboard:job", name=job.name)


@require_POST
@login_required
def job_pause_resume(request, name, action):
    job = get_object_or_404(Job, name=name)
    if action not in ("pause", "resume"):
        raise PermissionDenied(f"unknown action {action!r}")
    require_allowed(request, f"job.{action}")
    act(
        request,
        lambda: run(f"job.{action}", request.user, job=job),
        f"{action}d {name}",
    )
    return redirect("dashboard:job", name=job.name)

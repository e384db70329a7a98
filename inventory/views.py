"""Dashboard pages: thin views over selectors (reads) and services (writes).

Every page needs a login and the viewer role (a user in no role group sees nothing, as in the
API); every change needs the operator role (skipping a batch: admin), a POST
with a CSRF token, and redirects after it.
"""

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from inventory import selectors
from inventory.forms import BackfillForm, ReasonForm
from inventory.models import Backfill, BackfillStatus, Batch, BatchStatus, Connector, Job
from inventory.roles import ADMIN, OPERATOR, VIEWER, actor_name, has_role
from inventory.services import assets as asset_services
from inventory.services import backfills as backfill_services
from inventory.services import connectors as connector_services
from inventory.services import jobs as job_services
from inventory.services import lifecycle as batch_services
from inventory.services import scheduling as scheduling_services
from inventory.services.errors import TidemarkError
from inventory.services.secrets import mask


def role_required(role):
    def decorate(view):
        @wraps(view)
        @login_required
        def wrapper(request, *args, **kwargs):
            if not has_role(request.user, role):
                raise PermissionDenied(f"this needs the {role} role")
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def _page_context(request):
    return {
        "can_operate": has_role(request.user, OPERATOR),
        "can_admin": has_role(request.user, ADMIN),
    }


@require_GET
@role_required(VIEWER)
def overview(request):
    jobs = selectors.jobs_overview()
    partial = request.headers.get("HX-Request") == "true"
    template = "inventory/_jobs_table.html" if partial else "inventory/overview.html"
    context = {"jobs": jobs, "reaper": selectors.reaper_status(), **_page_context(request)}
    return render(request, template, context)


@require_GET
@role_required(VIEWER)
def job_detail(request, name):
    job = get_object_or_404(Job.objects.select_related("connector", "watermark"), name=name)
    history = list(selectors.watermark_history(job=job)[:200])
    context = {
        "job": job,
        "lag": selectors.job_lag(job=job),
        "blocker": selectors.job_blocker(job=job),
        "counts": selectors.job_batch_counts(job=job),
        "batches": Batch.objects.filter(job=job).order_by("-id")[:25],
        "history": history,
        "history_points": [
            {"at": event.created_at.strftime("%Y-%m-%d %H:%M:%S"), "position": event.new_position}
            for event in reversed(history)
        ],
        **_page_context(request),
    }
    return render(request, "inventory/job_detail.html", context)


@require_GET
@role_required(VIEWER)
def job_batches_partial(request, name):
    job = get_object_or_404(Job, name=name)
    batches = Batch.objects.filter(job=job).order_by("-id")[:25]
    return render(request, "inventory/_batches_table.html", {"batches": batches})


@require_POST
@role_required(OPERATOR)
def job_run_now(request, name):
    job = get_object_or_404(Job.objects.select_related("connector"), name=name)
    try:
        outcome = scheduling_services.job_run_now(job=job)
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
@role_required(OPERATOR)
def job_pause_resume(request, name, action):
    job = get_object_or_404(Job, name=name)
    if action not in ("pause", "resume"):
        raise PermissionDenied(f"unknown action {action!r}")
    _act(
        request,
        lambda: job_services.job_set_paused(job=job, paused=action == "pause"),
        f"{action}d {name}",
    )
    return redirect("dashboard:job", name=job.name)


@require_GET
@role_required(VIEWER)
def connectors(request):
    rows = Connector.objects.order_by("name").prefetch_related("jobs")
    return render(
        request, "inventory/connectors.html", {"connectors": rows, **_page_context(request)}
    )


@require_POST
@role_required(OPERATOR)
def connector_action(request, name, action):
    connector = get_object_or_404(Connector, name=name)
    actions = {
        "pause": (connector_services.connector_pause, f"paused {name}"),
        "resume": (connector_services.connector_resume, f"resumed {name}"),
        "discover": (
            asset_services.connector_discover_now,
            lambda new: f"scanned {name}: {new} new file(s) registered",
        ),
    }
    if action not in actions:
        raise PermissionDenied(f"unknown action {action!r}")
    service, done = actions[action]
    _act(request, lambda: service(connector=connector), done)
    return redirect("dashboard:connectors")


@role_required(VIEWER)
def backfills(request):
    form = BackfillForm(request.POST or None)
    if request.method == "POST":
        if not has_role(request.user, OPERATOR):
            raise PermissionDenied("scheduling a backfill needs the operator role")
        if form.is_valid():
            data = form.cleaned_data
            try:
                backfill = backfill_services.backfill_create(
                    **_backfill_args(data),
                    max_concurrency=data["max_concurrency"],
                    priority=data["priority"],
                    reason=data["reason"],
                    actor=actor_name(request.user),
                )
            except TidemarkError as exc:
                _form_error(form, exc)
            else:
                messages.success(request, f"Backfill {backfill.pk} scheduled.")
                return redirect("dashboard:backfills")
    rows = selectors.backfills_with_progress().order_by("-id")[:100]
    return render(
        request,
        "inventory/backfills.html",
        {"form": form, "backfills": rows, **_page_context(request)},
    )


@require_POST
@role_required(OPERATOR)
def backfill_preview(request):
    form = BackfillForm(request.POST)
    plan = None
    if form.is_valid():
        try:
            plan = backfill_services.backfill_preview(**_backfill_args(form.cleaned_data))
        except TidemarkError as exc:
            _form_error(form, exc)
    context = {"form": form, "plan": plan}
    if plan:
        context["total_weight"] = sum(p.weight for p in plan)
        context["total_items"] = sum(p.item_count for p in plan)
        context["max_weight"] = max(p.weight for p in plan)
    return render(request, "inventory/_backfill_preview.html", context)


@require_POST
@role_required(OPERATOR)
def backfill_action(request, pk, action):
    backfill = get_object_or_404(Backfill, pk=pk)
    statuses = {
        "pause": BackfillStatus.PAUSED,
        "resume": BackfillStatus.RUNNING,
        "cancel": BackfillStatus.CANCELLED,
    }
    if action not in statuses:
        raise PermissionDenied(f"unknown action {action!r}")
    _act(
        request,
        lambda: backfill_services.backfill_set_status(backfill=backfill, status=statuses[action]),
        f"backfill {pk}: {action}",
    )
    return redirect("dashboard:backfills")


@require_GET
@role_required(VIEWER)
def batch_detail(request, pk):
    batch = get_object_or_404(Batch.objects.select_related("job__connector", "backfill"), pk=pk)
    # shown, never saved: what a worker reported, with any credential in it masked
    batch.error, batch.result = mask(batch.error), mask(batch.result)
    attempts = list(batch.attempts.order_by("number"))
    for attempt in attempts:
        attempt.error = mask(attempt.error)
    context = {
        "batch": batch,
        "attempts": attempts,
        "items": selectors.batch_items(batch=batch)[:200],
        "reason_form": ReasonForm(),
        "can_skip": batch.status == BatchStatus.DEAD,
        **_page_context(request),
    }
    return render(request, "inventory/batch_detail.html", context)


@require_POST
@login_required
def batch_action(request, pk, action):
    batch = get_object_or_404(Batch, pk=pk)
    actor = actor_name(request.user)
    reason = request.POST.get("reason", "")
    actions = {
        "retry": (OPERATOR, lambda: batch_services.batch_retry(batch_id=pk, actor=actor)),
        "cancel": (
            OPERATOR,
            lambda: batch_services.batch_cancel(batch_id=pk, actor=actor, reason=reason),
        ),
        "skip": (
            ADMIN,
            lambda: batch_services.batch_skip(batch_id=pk, actor=actor, reason=reason),
        ),
    }
    if action not in actions:
        raise PermissionDenied(f"unknown action {action!r}")
    role, call = actions[action]
    if not has_role(request.user, role):
        raise PermissionDenied(f"{action} needs the {role} role")
    _act(request, call, f"batch {batch.pk}: {action}")
    return redirect("dashboard:batch", pk=batch.pk)


def _act(request, call, done_message):
    """Run a service call; its error or `done_message` (text, or a function of the result)."""
    try:
        result = call()
    except TidemarkError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done_message(result) if callable(done_message) else done_message)


def _backfill_args(data):
    return {
        "job": data["job"],
        "range_start": data["range_start"],
        "range_end": data["range_end"],
        "batch_weight": data.get("batch_weight"),
        "max_items": data.get("max_items"),
    }


def _form_error(form, exc):
    field = getattr(exc, "field", None)
    form.add_error(field if field in form.fields else None, getattr(exc, "message", str(exc)))

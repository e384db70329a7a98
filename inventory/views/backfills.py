"""The backfills' page: scheduling one (and its live preview), pausing, resuming, cancelling."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from inventory import selectors_backfills, selectors_freshness
from inventory.actions import role_of, run
from inventory.forms import BackfillForm, ThrottleForm
from inventory.models import Backfill, BackfillStatus
from inventory.roles import VIEWER, actor_name
from inventory.services import backfills as backfill_services
from inventory.services import estimates
from inventory.services.errors import PlanChanged, TidemarkError
from inventory.templatetags.human import weight as human_weight
from inventory.views.base import (
    act,
    form_error,
    is_htmx,
    page_context,
    require_allowed,
    role_required,
)
from inventory.views.freshness import PinForm


@role_required(VIEWER)
def backfills(request):
    form = BackfillForm(request.POST or None)
    plan_changed = None
    if request.method == "POST":
        require_allowed(request, "job.backfill")
        if form.is_valid():
            data = form.cleaned_data
            try:
                backfill = run(
                    "job.backfill",
                    request.user,
                    **backfill_args(data),
                    max_concurrency=data["max_concurrency"],
                    priority=data["priority"],
                    reason=data["reason"],
                    actor=actor_name(request.user),
                    fingerprint=data.get("fingerprint") or None,
                )
            except PlanChanged as exc:
                plan_changed = plan_changed_context(form, exc)
            except TidemarkError as exc:
                form_error(form, exc)
            else:
                messages.success(request, f"Backfill {backfill.pk} scheduled.")
                return redirect("dashboard:backfills")
    context = {
        "form": form,
        "plan_changed": plan_changed,
        "throttle_form": ThrottleForm(),
        "pin_form": PinForm(),
        **time_basis(form),
        **_backfills_context(),
        **page_context(request),
    }
    if request.method == "GET" and is_htmx(request):
        return render(request, "inventory/_backfills_list.html", context)
    return render(request, "inventory/backfills.html", context)


def _backfills_context() -> dict:
    rows = selectors_backfills.with_etas(
        selectors_backfills.backfills_with_progress().order_by("-id")[:100]
    )
    for row in rows:
        row.weight_pct = 100 * row.weight_done / row.weight_total if row.weight_total else 100
        row.batches_pct = 100 * row.batches_done / row.batches_total if row.batches_total else 100
    return {
        "backfills": rows,
        "live": any(row.status == BackfillStatus.RUNNING for row in rows),
        "throttles": selectors_backfills.backfill_throttles(),
        "freshness": selectors_freshness.throttle_status(),
    }


@require_POST
@role_required(role_of("job.backfill"))  # the live preview of the scheduling form
def backfill_preview(request):
    form = BackfillForm(request.POST)
    plan = span = None
    if form.is_valid():
        args = backfill_args(form.cleaned_data)
        budget = {k: args.pop(k) for k in ("batch_weight", "max_items")}
        try:
            span = backfill_services.backfill_range(**args)  # the ids a time range stands for
            plan = run(
                "job.backfill_preview",
                request.user,
                job=args["job"],
                range_start=span.range_start,
                range_end=span.range_end,
                **budget,
            )
        except TidemarkError as exc:
            form_error(form, exc)
    context = {"form": form, "plan": plan, "span": span, **time_basis(form)}
    if plan:
        job = form.cleaned_data["job"]
        summary = backfill_services.plan_summary(job=job, span=span, plan=plan)
        context.update(fingerprint=summary["fingerprint"], previewed=plan_text(summary))
        context["planned"] = summary["batches"]  # with the first and last item each holds
        budget = form.cleaned_data.get("batch_weight") or job.batch_weight
        total_weight = sum(p.weight for p in plan)
        throttle = selectors_backfills.backfill_throttle_for(job=job)
        duration = estimates.plan_duration(
            job=job, plan=plan, concurrency=form.cleaned_data["max_concurrency"]
        )
        context.update(
            total_weight=total_weight,
            total_items=sum(p.item_count for p in plan),
            max_weight=max(p.weight for p in plan),
            budget=budget,
            histogram=selectors_backfills.weight_histogram(
                plan, budget=budget, unit=job.connector.weight_unit
            ),
            duration=duration,
            throttle=throttle,
            weight_unit=job.connector.weight_unit,
        )
    return render(request, "inventory/_backfill_preview.html", context)


@require_POST
@login_required
def backfill_action(request, pk, action):
    backfill = get_object_or_404(Backfill, pk=pk)
    if action not in ("pause", "resume", "cancel"):
        raise PermissionDenied(f"unknown action {action!r}")
    require_allowed(request, f"backfill.{action}")
    act(
        request,
        lambda: run(f"backfill.{action}", request.user, backfill=backfill),
        f"backfill {pk}: {action}",
    )
    return redirect("dashboard:backfills")


def backfill_args(data):
    """The pair the form's switch chose (the other pair's inputs are ignored, not refused)."""
    pair = ("time_start", "time_end") if data.get("by") == "time" else ("range_start", "range_end")
    return {
        "job": data["job"],
        **{field: data.get(field) for field in pair},
        "batch_weight": data.get("batch_weight"),
        "max_items": data.get("max_items"),
    }


def plan_changed_context(form, exc: PlanChanged) -> dict:
    """The plan changed between the preview and the submit: say how, and pin the plan as it is
    now, so that scheduling again runs that one (never another plan silently)."""
    now = exc.plan
    form.data = form.data.copy()
    form.data["fingerprint"] = now["fingerprint"]
    form.data["previewed"] = plan_text(now)
    previewed = form.cleaned_data.get("previewed") or "(not shown)"
    form.add_error(
        None,
        f"The plan changed since the preview: previewed {previewed} (fingerprint "
        f"{form.cleaned_data['fingerprint']}), now {plan_text(now)} (fingerprint "
        f"{now['fingerprint']}). Nothing was scheduled; schedule again to run the plan below.",
    )
    return now


def plan_text(plan: dict) -> str:
    return (
        f"{plan['batch_count']} batch(es), {plan['total_items']} items, weight "
        f"{human_weight(plan['total_weight'], plan.get('weight_unit', ''))} over ids "
        f"{plan['range_start']}..{plan['range_end']}"
    )


def time_basis(form) -> dict:
    """What "by time" means for the form's job, or why it has no times: the switch's note."""
    job = form.cleaned_data.get("job") if hasattr(form, "cleaned_data") else None
    if job is None:
        return {}
    try:
        return {"time_basis": backfill_services.backfill_time_basis(job.connector)}
    except TidemarkError as exc:
        return {"time_basis_refused": exc.message}

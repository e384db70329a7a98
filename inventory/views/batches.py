"""A batch's page (its items, attempts and output) and its actions (retry, cancel, skip)."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from inventory import selectors
from inventory.actions import run
from inventory.forms import ReasonForm
from inventory.models import Batch, BatchStatus
from inventory.roles import VIEWER, actor_name
from inventory.services.secrets import mask
from inventory.views.base import act, page_context, positive_int, require_allowed, role_required

ITEMS_PAGE = 100


@require_GET
@role_required(VIEWER)
def batch_detail(request, pk):
    batch = get_object_or_404(Batch.objects.select_related("job__connector", "backfill"), pk=pk)
    # shown, never saved: what a worker reported, with any credential in it masked
    batch.error, batch.result = mask(batch.error), mask(batch.result)
    attempts = list(batch.attempts.order_by("number"))
    for attempt in attempts:
        attempt.error = mask(attempt.error)
        attempt.duration = attempt.finished_at - attempt.started_at if attempt.finished_at else None
    page_number = positive_int(request.GET.get("page"), 1)
    items = selectors.batch_items(
        batch=batch, offset=(page_number - 1) * ITEMS_PAGE, limit=ITEMS_PAGE + 1
    )
    context = {
        "batch": batch,
        "items_bounds": selectors.batch_item_bounds(batch=batch),
        "attempts": attempts,
        "items": items[:ITEMS_PAGE],
        "items_page": page_number,
        "items_more": len(items) > ITEMS_PAGE,
        "items_pages": max((batch.item_count + ITEMS_PAGE - 1) // ITEMS_PAGE, 1),
        "error_summary": selectors.error_summary(batch.error),
        "metrics": selectors.result_metrics(batch.result),
        "reason_form": ReasonForm(),
        "can_skip": batch.status == BatchStatus.DEAD,
        **page_context(request),
    }
    return render(request, "inventory/batch_detail.html", context)


@require_POST
@login_required
def batch_action(request, pk, action):
    batch = get_object_or_404(Batch, pk=pk)
    actor = actor_name(request.user)
    reason = request.POST.get("reason", "")
    actions = {
        "retry": lambda: run("batch.retry", request.user, batch_id=pk, actor=actor),
        "cancel": lambda: run(
            "batch.cancel", request.user, batch_id=pk, actor=actor, reason=reason
        ),
        "skip": lambda: run("batch.skip", request.user, batch_id=pk, actor=actor, reason=reason),
    }
    if action not in actions:
        raise PermissionDenied(f"unknown action {action!r}")
    require_allowed(request, f"batch.{action}")
    call = actions[action]
    act(request, call, f"batch {batch.pk}: {action}")
    return redirect("dashboard:batch", pk=batch.pk)

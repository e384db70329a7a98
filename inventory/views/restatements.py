"""Dashboard: applying or dismissing a job's proposed replays (restatements, job page).

The same services as the API (services/restatement_records.py); the roles of inventory/actions.py.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from inventory.actions import run
from inventory.models import Restatement
from inventory.roles import actor_name
from inventory.services.errors import PlanChanged, TidemarkError
from inventory.views.base import page_context, require_allowed


@require_POST
@login_required
def restatement_action(request, name, pk, action):
    if action not in ("apply", "dismiss"):
        raise PermissionDenied(f"unknown action {action!r}")
    require_allowed(request, f"restatement.{action}")
    record = get_object_or_404(Restatement.objects.select_related("job"), job__name=name, pk=pk)
    actor = actor_name(request.user)
    try:
        if action == "apply":
            record = run(
                "restatement.apply",
                request.user,
                restatement=record,
                actor=actor,
                fingerprint=request.POST.get("fingerprint") or None,
            )
            messages.success(
                request, f"Restatement {pk} applied: backfill {record.backfill_id} rebuilds it."
            )
        else:
            run(
                "restatement.dismiss",
                request.user,
                restatement=record,
                actor=actor,
                reason=request.POST.get("reason", ""),
            )
            messages.success(request, f"Restatement {pk} dismissed.")
    except PlanChanged as exc:
        # the difference, and the plan as it is now to apply instead: never another plan silently
        context = {
            "restatement": record,
            "job": record.job,
            "error": str(exc),
            "previewed": record.preview or {},
            "now": exc.plan,
            **page_context(request),
        }
        return render(request, "inventory/restatement_changed.html", context, status=409)
    except TidemarkError as exc:
        messages.error(request, str(exc))
    return redirect("dashboard:job", name=name)

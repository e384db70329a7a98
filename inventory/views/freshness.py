"""The backfills page's freshness controller: a person pins the backfills' rate or unpins it."""

from django import forms
from django.contrib import messages
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from inventory.actions import role_of, run
from inventory.bounds import BIGINT
from inventory.roles import actor_name
from inventory.services.errors import TidemarkError
from inventory.views.base import require_allowed, role_required


class PinForm(forms.Form):
    pinned_rate = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=BIGINT,
        label="Pinned rate",
        help_text="weight per minute for all backfills, instead of the controller's; empty: unpin",
    )


@require_POST
@role_required(role_of("throttle.pin"))
def throttle_pin(request):
    require_allowed(request, "throttle.pin")
    form = PinForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Rate not pinned: {form.errors.as_text()}")
        return redirect("dashboard:backfills")
    rate = form.cleaned_data["pinned_rate"]
    try:
        run("throttle.pin", request.user, rate=rate, actor=actor_name(request.user))
    except TidemarkError as exc:
        messages.error(request, f"Rate not pinned: {exc}")
    else:
        messages.success(
            request,
            f"Backfills pinned at {rate:,} weight/min."
            if rate
            else "Pin removed: the freshness controller sets the backfills' rate again.",
        )
    return redirect("dashboard:backfills")

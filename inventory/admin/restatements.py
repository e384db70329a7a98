"""Restatements: what was restated, when and why; proposed replays applied or dismissed."""

from django.contrib import admin, messages

from inventory.actions import run
from inventory.admin.base import ReadOnlyAdmin, RoleActionsMixin, service_action
from inventory.models import Restatement, RestatementStatus
from inventory.roles import actor_name
from inventory.services.errors import TidemarkError


@admin.register(Restatement)
class RestatementAdmin(RoleActionsMixin, ReadOnlyAdmin):
    """What was restated, when and why; proposed replays applied here as on the dashboard."""

    list_display = [
        "id",
        "job",
        "range_start",
        "range_end",
        "cause",
        "state",
        "backfill",
        "decided_by",
        "created_at",
    ]
    list_filter = ["status", "cause", "job"]
    search_fields = ["job__name", "reason"]
    list_select_related = ["job", "backfill"]
    actions = ["apply_restatements"]

    @admin.display(description="state")
    def state(self, restatement):
        return restatement.state

    @service_action("restatement.apply", "Apply selected proposed replays (their pinned plans)")
    def apply_restatements(self, request, queryset):
        actor = actor_name(request.user)
        for record in queryset.filter(status=RestatementStatus.PROPOSED).order_by("id"):
            try:
                record = run("restatement.apply", request.user, restatement=record, actor=actor)
            except TidemarkError as exc:  # a changed plan says how (PlanChanged's message)
                self.message_user(request, f"restatement {record.pk}: {exc}", messages.ERROR)
            else:
                self.message_user(
                    request,
                    f"restatement {record.pk} applied: backfill {record.backfill_id}",
                    messages.SUCCESS,
                )

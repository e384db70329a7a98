"""Batches and their attempts: read-only, retried, cancelled or skipped through the lifecycle
services."""

import json

from django import forms
from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils.html import format_html

from inventory.actions import run
from inventory.admin.base import ReadOnlyAdmin, RoleActionsMixin, service_action
from inventory.models import Batch, BatchAttempt
from inventory.roles import actor_name
from inventory.services.secrets import mask


def _masked_json(value):
    """Worker output shown as the dashboard and the API show it: any credential masked."""
    return format_html("<pre>{}</pre>", json.dumps(mask(value), indent=2, default=str))


class BatchAttemptInline(admin.TabularInline):
    model = BatchAttempt
    fields = ["number", "worker", "started_at", "finished_at", "outcome", "masked_error"]
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="error")
    def masked_error(self, attempt):
        return _masked_json(attempt.error)


class SkipForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Why these items need not be processed; recorded on each batch.",
    )


@admin.register(Batch)
class BatchAdmin(RoleActionsMixin, ReadOnlyAdmin):
    list_display = [
        "id",
        "job",
        "kind",
        "status",
        "first_item",
        "last_item",
        "item_count",
        "weight",
        "attempt",
        "worker",
        "finished_at",
    ]
    list_filter = ["status", "kind", "job"]
    search_fields = ["job__name", "worker"]
    list_select_related = ["job"]
    show_full_result_count = False
    inlines = [BatchAttemptInline]
    actions = ["retry_batches", "cancel_batches", "skip_batches"]

    # worker output (errors, results, the config a batch ran with) is shown masked
    MASKED = ("error", "result", "config_snapshot")
    exclude = MASKED  # shown by the masked_* fields instead

    def get_readonly_fields(self, request, obj=None):
        return [
            f"masked_{f.name}" if f.name in self.MASKED else f.name
            for f in Batch._meta.concrete_fields
        ]

    @admin.display(description="error")
    def masked_error(self, batch):
        return _masked_json(batch.error)

    @admin.display(description="result")
    def masked_result(self, batch):
        return _masked_json(batch.result)

    @admin.display(description="config snapshot")
    def masked_config_snapshot(self, batch):
        return _masked_json(batch.config_snapshot)

    @service_action("batch.retry", "Retry selected dead/failed batches")
    def retry_batches(self, request, queryset):
        actor = actor_name(request.user)
        self.run_service(
            request,
            queryset,
            "sent back to the queue",
            lambda b: run("batch.retry", request.user, batch_id=b.pk, actor=actor),
        )

    @service_action("batch.cancel", "Cancel selected batches")
    def cancel_batches(self, request, queryset):
        actor = actor_name(request.user)
        self.run_service(
            request,
            queryset,
            "cancelled",
            lambda b: run(
                "batch.cancel",
                request.user,
                batch_id=b.pk,
                actor=actor,
                reason="cancelled in the admin",
            ),
        )

    @service_action("batch.skip", "Skip selected dead batches (with a reason)…")
    def skip_batches(self, request, queryset):
        form = SkipForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            actor = actor_name(request.user)
            reason = form.cleaned_data["reason"]
            self.run_service(
                request,
                queryset,
                "skipped",
                lambda b: run(
                    "batch.skip", request.user, batch_id=b.pk, actor=actor, reason=reason
                ),
            )
            return None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Skip dead batches",
            "batches": queryset,
            "form": form,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/inventory/batch_skip.html", context)


@admin.register(BatchAttempt)
class BatchAttemptAdmin(ReadOnlyAdmin):
    list_display = ["batch", "number", "worker", "started_at", "finished_at", "outcome"]
    list_filter = ["outcome"]
    search_fields = ["worker"]
    list_select_related = ["batch"]
    show_full_result_count = False

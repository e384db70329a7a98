"""Watermarks and their events: read-only, corrected through an audited correction."""

import json

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from inventory import selectors
from inventory.actions import allowed, role_of, run
from inventory.admin.base import ReadOnlyAdmin, services_form_error
from inventory.models import Watermark, WatermarkEvent, WatermarkSource
from inventory.roles import actor_name
from inventory.services.errors import TidemarkError


class WatermarkEventInline(admin.TabularInline):
    model = WatermarkEvent
    fields = [
        "created_at",
        "source",
        "actor",
        "old_value",
        "new_value",
        "old_position",
        "new_position",
        "is_replay",
        "reason",
        "batch",
    ]
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    ordering = ["-id"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("batch")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class WatermarkCorrectionForm(forms.Form):
    value = forms.CharField(
        help_text="JSON: an int (the last committed item id), an ISO datetime string, "
        "an object of key -> offset, or a list of file names. A bare datetime is accepted too.",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
    )
    position = forms.IntegerField(
        required=False, help_text="non-int watermarks only: the committed item-id position"
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))
    replay = forms.BooleanField(
        required=False,
        label="Confirm replay",
        help_text="Required to move the watermark backwards: the items after the new value are "
        "processed again.",
    )

    skip_unseen = forms.BooleanField(
        required=False,
        label="Skip unseen items",
        help_text="Required to move the watermark past the job's last known item: items that "
        "arrive later with ids up to it are skipped (listed in the gap report).",
    )

    def clean_value(self):
        raw = self.cleaned_data["value"].strip()
        try:
            return json.loads(raw)
        except ValueError:
            return raw  # e.g. 2024-05-01T00:00:00+00:00 typed without quotes


@admin.register(Watermark)
class WatermarkAdmin(ReadOnlyAdmin):
    list_display = ["job", "type", "position", "value", "updated_at", "correct_link"]
    list_filter = ["type"]
    search_fields = ["job__name"]
    list_select_related = ["job"]
    fields = ["job", "type", "position", "value", "updated_at", "correct_link"]
    readonly_fields = fields
    inlines = [WatermarkEventInline]

    @admin.display(description="correction")
    def correct_link(self, watermark):
        url = reverse("admin:inventory_watermark_correct", args=[watermark.pk])
        return format_html('<a href="{}">Correct…</a>', url)

    def get_urls(self):
        return [
            path(
                "<int:watermark_id>/correct/",
                self.admin_site.admin_view(self.correct_view),
                name="inventory_watermark_correct",
            ),
            *super().get_urls(),
        ]

    def correct_view(self, request, watermark_id: int):
        if not allowed(request.user, "watermark.correct"):
            raise PermissionDenied(
                f"correcting a watermark needs the {role_of('watermark.correct')} role"
            )
        watermark = Watermark.objects.select_related("job__connector").filter(pk=watermark_id)
        watermark = watermark.first()
        if watermark is None:
            raise PermissionDenied("no such watermark")
        form = WatermarkCorrectionForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                run(
                    "watermark.correct",
                    request.user,
                    job=watermark.job,
                    value=data["value"],
                    position=data["position"],
                    actor=actor_name(request.user),
                    reason=data["reason"],
                    replay=data["replay"],
                    skip_unseen=data["skip_unseen"],
                    source=WatermarkSource.ADMIN,
                )
            except TidemarkError as exc:
                services_form_error(form, exc)
            else:
                watermark.refresh_from_db()
                self.message_user(
                    request,
                    f"watermark of {watermark.job.name} corrected to {watermark.value}",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(
                    reverse("admin:inventory_watermark_change", args=[watermark.pk])
                )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Correct the watermark of {watermark.job.name}",
            "watermark": watermark,
            "form": form,
            "events": selectors.watermark_history(job=watermark.job)[:50],
            "lag": selectors.job_lag(job=watermark.job),
        }
        return TemplateResponse(request, "admin/inventory/watermark_correct.html", context)


@admin.register(WatermarkEvent)
class WatermarkEventAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "job_name",
        "source",
        "actor",
        "old_value",
        "new_value",
        "is_replay",
        "reason",
    ]
    list_filter = ["source", "is_replay"]
    search_fields = ["watermark__job__name", "actor", "reason"]
    list_select_related = ["watermark__job"]

    @admin.display(description="job", ordering="watermark__job__name")
    def job_name(self, event):
        return event.watermark.job.name

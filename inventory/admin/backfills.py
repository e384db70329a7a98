"""Backfills (paused, resumed, cancelled) and the shared backfill throttle."""

from django import forms
from django.contrib import admin

from inventory import selectors_backfills
from inventory.actions import allowed, run
from inventory.admin.base import (
    ReadOnlyAdmin,
    RoleActionsMixin,
    service_action,
    services_form_error,
)
from inventory.models import Backfill, BackfillThrottle
from inventory.roles import VIEWER, has_role
from inventory.services import throttle as throttle_services
from inventory.services.errors import TidemarkError


@admin.register(Backfill)
class BackfillAdmin(RoleActionsMixin, ReadOnlyAdmin):
    """Backfills are scheduled with a preview (API or dashboard); here they are watched and steered."""

    list_display = [
        "id",
        "job",
        "range_start",
        "range_end",
        "requested",
        "status",
        "priority",
        "max_concurrency",
        "progress",
        "created_by",
        "created_at",
    ]
    list_filter = ["status", "job"]
    search_fields = ["job__name", "reason", "created_by"]
    actions = ["pause_backfills", "resume_backfills", "cancel_backfills"]

    def get_queryset(self, request):
        return selectors_backfills.backfills_with_progress(super().get_queryset(request))

    def get_readonly_fields(self, request, obj=None):
        return [*(f.name for f in Backfill._meta.concrete_fields), "progress"]

    @admin.display(description="progress")
    def progress(self, backfill):
        total = getattr(backfill, "batches_total", None)
        if total is None:
            backfill = selectors_backfills.backfills_with_progress().get(pk=backfill.pk)
            total = backfill.batches_total
        return f"{backfill.batches_done}/{total} batches, {backfill.batches_dead} dead"

    def _set(self, request, queryset, key, label):
        self.run_service(request, queryset, label, lambda b: run(key, request.user, backfill=b))

    @service_action("backfill.pause", "Pause selected backfills")
    def pause_backfills(self, request, queryset):
        self._set(request, queryset, "backfill.pause", "paused")

    @service_action("backfill.resume", "Resume selected backfills")
    def resume_backfills(self, request, queryset):
        self._set(request, queryset, "backfill.resume", "resumed")

    @service_action("backfill.cancel", "Cancel selected backfills")
    def cancel_backfills(self, request, queryset):
        self._set(request, queryset, "backfill.cancel", "cancelled")


class BackfillThrottleForm(forms.ModelForm):
    """Saves through throttle_set while validating, so its error shows on the field."""

    user = None  # set per request by RoleActionsMixin.get_form

    class Meta:
        model = BackfillThrottle
        fields = ["connector", "weight_per_minute"]

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        # the scope is read-only once set (the field is then not on the form)
        fixed = "connector" not in self.fields
        connector = self.instance.connector if fixed else cleaned.get("connector")
        try:
            run(
                "throttle.set",
                self.user,
                connector=connector,
                weight_per_minute=cleaned.get("weight_per_minute"),
            )
        except TidemarkError as exc:
            services_form_error(self, exc)
        else:
            # the row the service wrote, so the form's own checks see it as this one
            self.instance = BackfillThrottle.objects.get(connector=connector)
        return cleaned


@admin.register(BackfillThrottle)
class BackfillThrottleAdmin(RoleActionsMixin, admin.ModelAdmin):
    """The weight-per-minute budgets all running backfills draw from (global: no connector),
    with what each used in the last minute; set and removed through throttle_set, as in the API."""

    form = BackfillThrottleForm
    list_display = ["scope", "weight_per_minute", "used_last_minute", "updated_at"]
    list_select_related = ["connector"]
    readonly_fields = ["updated_at"]

    def has_view_permission(self, request, obj=None):
        return has_role(request.user, VIEWER)

    def has_module_permission(self, request):
        return has_role(request.user, VIEWER)

    def has_add_permission(self, request):
        return allowed(request.user, "throttle.set")

    def has_change_permission(self, request, obj=None):
        return allowed(request.user, "throttle.set")

    def has_delete_permission(self, request, obj=None):
        return allowed(request.user, "throttle.set")

    def get_readonly_fields(self, request, obj=None):
        # a budget's scope is fixed: remove it and add another
        return ["connector", *self.readonly_fields] if obj is not None else self.readonly_fields

    def changelist_view(self, request, extra_context=None):
        self._used = throttle_services.throttle_usage()
        return super().changelist_view(request, extra_context)

    @admin.display(description="scope")
    def scope(self, throttle):
        return throttle.connector.name if throttle.connector_id else "all connectors"

    @admin.display(description="weight started in the last minute")
    def used_last_minute(self, throttle):
        return getattr(self, "_used", {}).get(throttle.connector_id, 0)

    def save_model(self, request, obj, form, change):
        """BackfillThrottleForm already saved it through the service."""

    def delete_model(self, request, obj):
        run("throttle.set", request.user, connector=obj.connector, weight_per_minute=None)

    def delete_queryset(self, request, queryset):
        self.run_service(
            request,
            queryset.select_related("connector"),
            "removed",
            lambda t: run(
                "throttle.set", request.user, connector=t.connector, weight_per_minute=None
            ),
        )

"""The freshness controller in the admin: its settings and a person's pin (saved through the
services, as the API and the backfills page do), and its decisions, read-only."""

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied

from inventory.actions import allowed, run
from inventory.admin.base import ReadOnlyAdmin, RoleActionsMixin, services_form_error
from inventory.models import FreshnessThrottle, ThrottleDecision
from inventory.roles import VIEWER, actor_name, has_role
from inventory.services.errors import TidemarkError
from inventory.services.freshness import SETTINGS_FIELDS


class FreshnessThrottleForm(forms.ModelForm):
    """Saves through throttle_pin and throttle_control_configure while validating, so an error
    shows on its field."""

    user = None  # set per request by RoleActionsMixin.get_form

    class Meta:
        model = FreshnessThrottle
        fields = ["pinned_rate", *SETTINGS_FIELDS]

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        settings = {f: cleaned[f] for f in SETTINGS_FIELDS if f in self.changed_data}
        try:
            if settings:
                run("throttle.configure", self.user, actor=actor_name(self.user), **settings)
            if "pinned_rate" in self.changed_data:
                run(
                    "throttle.pin",
                    self.user,
                    rate=cleaned.get("pinned_rate"),
                    actor=actor_name(self.user),
                )
        except TidemarkError as exc:
            services_form_error(self, exc)
        except PermissionDenied as exc:
            self.add_error(None, str(exc))
        else:
            self.instance = FreshnessThrottle.objects.get(id=1)
        return cleaned


@admin.register(FreshnessThrottle)
class FreshnessThrottleAdmin(RoleActionsMixin, admin.ModelAdmin):
    """The one controller row: the limit it sets, its settings, the pin."""

    form = FreshnessThrottleForm
    list_display = ["__str__", "enabled", "rate", "concurrency", "pinned_rate", "stepped_at"]
    readonly_fields = [
        "rate",
        "concurrency",
        "reference_rate",
        "pinned_by",
        "pinned_at",
        "stepped_at",
        "updated_at",
    ]
    actions = ["remove_pin"]

    def has_view_permission(self, request, obj=None):
        return has_role(request.user, VIEWER)

    def has_module_permission(self, request):
        return has_role(request.user, VIEWER)

    def has_add_permission(self, request):
        return False  # the row is made by the first step or pin

    def has_change_permission(self, request, obj=None):
        return allowed(request.user, "throttle.pin")

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        """FreshnessThrottleForm already saved it through the services."""

    @admin.action(description="Remove the pin", permissions=["change"])
    def remove_pin(self, request, queryset):
        self.run_service(
            request,
            queryset,
            "pin removed",
            lambda _row: run(
                "throttle.pin", request.user, rate=None, actor=actor_name(request.user)
            ),
        )


@admin.register(ThrottleDecision)
class ThrottleDecisionAdmin(ReadOnlyAdmin):
    list_display = ["at", "old_rate", "new_rate", "old_concurrency", "new_concurrency", "reason"]
    search_fields = ["reason"]

    def has_view_permission(self, request, obj=None):
        return has_role(request.user, VIEWER)

    def has_module_permission(self, request):
        return has_role(request.user, VIEWER)

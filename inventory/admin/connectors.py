"""Connectors (edited through the connector services) and their assets (read-only)."""

from django import forms
from django.contrib import admin
from django.utils.html import format_html, format_html_join

from inventory import selectors
from inventory.actions import run
from inventory.admin.base import (
    ReadOnlyAdmin,
    RoleActionsMixin,
    own_delete_permission_only,
    service_action,
)
from inventory.models import Asset, Connector, WatermarkSource
from inventory.roles import actor_name
from inventory.services.errors import InvalidInput, TidemarkError


class ConnectorForm(forms.ModelForm):
    """Saves through connector_create / connector_update / connector_reset while validating, so a
    service error shows on the field it names (as JobForm does)."""

    reset_reason = forms.CharField(
        required=False,
        label="Reset reason",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Changing the source (path, meta_table, table, topic, dsn_env) of a connector "
        "with jobs resets their watermarks to the start: give the reason here to confirm it.",
    )
    actor = ""  # set per request by ConnectorAdmin.get_form
    user = None  # set per request by RoleActionsMixin.get_form

    class Meta:
        model = Connector
        fields = ["name", "kind", "labels", "config", "start_after"]

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            if self.instance.pk is None:
                self.instance = run(
                    "connector.create",
                    self.user,
                    name=cleaned["name"],
                    kind=cleaned["kind"],
                    config=cleaned["config"],
                    labels=cleaned["labels"],
                    start_after=cleaned["start_after"],
                )
            elif cleaned.get("reset_reason"):
                self.instance = run(
                    "connector.reset",
                    self.user,
                    connector=self.instance,
                    config=cleaned["config"],
                    actor=self.actor,
                    reason=cleaned["reset_reason"],
                    source=WatermarkSource.ADMIN,
                )
                self.instance = run(
                    "connector.update",
                    self.user,
                    connector=self.instance,
                    labels=cleaned["labels"],
                    start_after=cleaned["start_after"],
                )
            else:
                self.instance = run(
                    "connector.update",
                    self.user,
                    connector=self.instance,
                    config=cleaned["config"],
                    labels=cleaned["labels"],
                    start_after=cleaned["start_after"],
                )
        except InvalidInput as exc:
            if exc.field == "reason":
                self.add_error("reset_reason", exc.message)
            elif exc.field in self.fields:
                self.add_error(exc.field, exc.message)
            else:  # config.path, config.meta_table.table, ...
                self.add_error("config", f"{exc.field}: {exc.message}")
        except TidemarkError as exc:
            self.add_error(None, str(exc))
        return cleaned


@admin.register(Connector)
class ConnectorAdmin(RoleActionsMixin, admin.ModelAdmin):
    form = ConnectorForm
    list_display = ["name", "kind", "state", "start_after", "labels", "updated_at"]
    list_filter = ["kind", "state"]
    search_fields = ["name", "start_after"]
    readonly_fields = ["state", "cursor", "state_history", "created_at", "updated_at"]
    actions = ["pause_connectors", "resume_connectors"]

    @admin.display(description="state changes (newest first)")
    def state_history(self, obj):
        """The connector's recorded state changes, read only (not an inline: nothing to post)."""
        events = selectors.connector_history(connector=obj)[:20]
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{} &rarr; {}</td><td>{}</td><td>{}</td></tr>",
            ((e.created_at, e.old_state, e.new_state, e.actor or "-", e.reason) for e in events),
        )
        return format_html("<table>{}</table>", rows) if events else "none yet"

    def get_readonly_fields(self, request, obj=None):
        fixed = ["name", "kind"] if obj is not None else []
        return [*fixed, *self.readonly_fields]

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        form.actor = actor_name(request.user)
        return form

    def save_model(self, request, obj, form, change):
        """ConnectorForm already saved it through the service."""

    def get_deleted_objects(self, objs, request):
        return own_delete_permission_only(self, objs, request)

    def delete_model(self, request, obj):
        run("connector.delete", request.user, connector=obj)

    def delete_queryset(self, request, queryset):
        self.run_service(
            request,
            queryset,
            "deleted",
            lambda c: run("connector.delete", request.user, connector=c),
        )

    @service_action("connector.pause", "Pause selected connectors")
    def pause_connectors(self, request, queryset):
        self.run_service(
            request,
            queryset,
            "paused",
            lambda c: run(
                "connector.pause", request.user, connector=c, actor=request.user.get_username()
            ),
        )

    @service_action("connector.resume", "Resume selected connectors")
    def resume_connectors(self, request, queryset):
        self.run_service(
            request,
            queryset,
            "resumed",
            lambda c: run(
                "connector.resume", request.user, connector=c, actor=request.user.get_username()
            ),
        )


@admin.register(Asset)
class AssetAdmin(ReadOnlyAdmin):
    list_display = ["id", "connector", "location", "weight", "discovered_at"]
    list_filter = ["connector"]
    search_fields = ["location"]
    list_select_related = ["connector"]
    show_full_result_count = False

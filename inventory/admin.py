"""The Django admin as the operations tool.

System-managed state (status, attempt, lease, span, watermark position/value, events) is read-only;
changes go through the same services the API and the dashboard call, as actions or forms that
report with message_user. Operators use the actions (pause/resume, retry, cancel); admins also
edit connectors and jobs, skip dead batches and correct watermarks (inventory/roles.py).
"""

import json

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from inventory import selectors
from inventory.actions import allowed, role_of
from inventory.models import (
    Asset,
    Backfill,
    BackfillStatus,
    BackfillThrottle,
    Batch,
    BatchAttempt,
    BatchStatus,
    Connector,
    Job,
    Restatement,
    RestatementStatus,
    Watermark,
    WatermarkEvent,
    WatermarkSource,
)
from inventory.roles import ADMIN, OPERATOR, VIEWER, actor_name, has_role
from inventory.services import backfills as backfill_services
from inventory.services import connectors as connector_services
from inventory.services import corrections, restatement_records
from inventory.services import gaps as gap_services
from inventory.services import jobs as job_services
from inventory.services import lifecycle as batch_services
from inventory.services import throttle as throttle_services
from inventory.services.errors import InvalidInput, PlanChanged, TidemarkError
from inventory.services.secrets import mask


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records the system writes: viewable, never added, edited or deleted by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# an admin action's permission by the role it needs: has_<permission>_permission below
ROLE_PERMISSION = {OPERATOR: "operate", ADMIN: "administer"}


def service_action(key: str, description: str):
    """An admin action needing the role inventory/actions.py declares for `key`."""
    return admin.action(description=description, permissions=[ROLE_PERMISSION[role_of(key)]])


class RoleActionsMixin:
    """`allowed_permissions = ("operate",)` / `("administer",)` on an action checks the role."""

    def has_operate_permission(self, request):
        return has_role(request.user, OPERATOR)

    def has_administer_permission(self, request):
        return has_role(request.user, ADMIN)

    def run_service(self, request, queryset, label: str, call) -> None:
        """Call `call(obj)` for each selected object; one message for the successes, one per error."""
        done = []
        for obj in queryset:
            try:
                call(obj)
            except TidemarkError as exc:
                self.message_user(request, f"{obj}: {exc}", messages.ERROR)
            else:
                done.append(str(obj))
        if done:
            self.message_user(request, f"{label}: {', '.join(done)}", messages.SUCCESS)


def _services_form_error(form, exc: TidemarkError) -> None:
    """Show a service error on the form field it names, or on the form."""
    field = exc.field if isinstance(exc, InvalidInput) else None
    if field not in form.fields:
        field = None
    form.add_error(field, exc.message if isinstance(exc, InvalidInput) else str(exc))


def _own_delete_permission_only(model_admin, objs, request):
    """get_deleted_objects, needing delete permission on the model itself only: the records that
    go with it (assets, batches, events) are system-managed and read-only, and the delete service
    removes them."""
    deleted, counts, perms_needed, protected = admin.ModelAdmin.get_deleted_objects(
        model_admin, objs, request
    )
    own = {model_admin.model._meta.verbose_name}
    return deleted, counts, perms_needed & own, protected


# ---- connectors and assets ---------------------------------------------------------------------


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

    class Meta:
        model = Connector
        fields = ["name", "kind", "labels", "config", "start_after"]

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            if self.instance.pk is None:
                self.instance = connector_services.connector_create(
                    name=cleaned["name"],
                    kind=cleaned["kind"],
                    config=cleaned["config"],
                    labels=cleaned["labels"],
                    start_after=cleaned["start_after"],
                )
            elif cleaned.get("reset_reason"):
                self.instance = connector_services.connector_reset(
                    connector=self.instance,
                    config=cleaned["config"],
                    actor=self.actor,
                    reason=cleaned["reset_reason"],
                    source=WatermarkSource.ADMIN,
                )
                self.instance = connector_services.connector_update(
                    connector=self.instance,
                    labels=cleaned["labels"],
                    start_after=cleaned["start_after"],
                )
            else:
                self.instance = connector_services.connector_update(
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
        return _own_delete_permission_only(self, objs, request)

    def delete_model(self, request, obj):
        connector_services.connector_delete(connector=obj)

    def delete_queryset(self, request, queryset):
        self.run_service(
            request,
            queryset,
            "deleted",
            lambda c: connector_services.connector_delete(connector=c),
        )

    @service_action("connector.pause", "Pause selected connectors")
    def pause_connectors(self, request, queryset):
        self.run_service(
            request,
            queryset,
            "paused",
            lambda c: connector_services.connector_pause(
                connector=c, actor=request.user.get_username()
            ),
        )

    @service_action("connector.resume", "Resume selected connectors")
    def resume_connectors(self, request, queryset):
        self.run_service(
            request,
            queryset,
            "resumed",
            lambda c: connector_services.connector_resume(
                connector=c, actor=request.user.get_username()
            ),
        )


@admin.register(Asset)
class AssetAdmin(ReadOnlyAdmin):
    list_display = ["id", "connector", "location", "weight", "discovered_at"]
    list_filter = ["connector"]
    search_fields = ["location"]
    list_select_related = ["connector"]
    show_full_result_count = False


# ---- jobs and watermarks -----------------------------------------------------------------------


class JobForm(forms.ModelForm):
    """Saves through job_create / job_update while validating, so that a service error shows on
    the field it names. The admin's change view runs in one transaction: all or nothing."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "restatements" in self.fields:  # a viewer's read-only form has no fields
            self.fields["restatements"].required = False  # default: automatic

    class Meta:
        model = Job
        fields = [*job_services.FIXED_JOB_FIELDS, *job_services.JOB_SETTINGS]

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        if not cleaned.get("restatements"):
            cleaned.pop("restatements", None)  # not given: the job's default policy
        try:
            if self.instance.pk is None:
                self.instance = job_services.job_create(**cleaned)
            else:
                changed = {name: cleaned[name] for name in self.changed_data if name in cleaned}
                self.instance = job_services.job_update(job=self.instance, **changed)
        except TidemarkError as exc:
            _services_form_error(self, exc)
        return cleaned


@admin.register(Job)
class JobAdmin(RoleActionsMixin, admin.ModelAdmin):
    form = JobForm
    list_display = [
        "name",
        "connector",
        "processor",
        "watermark_type",
        "watermark_position",
        "batch_weight",
        "max_items",
        "max_concurrency",
        "restatements",
        "paused",
    ]
    list_filter = ["paused", "watermark_type", "restatements", "connector"]
    search_fields = ["name", "connector__name", "processor"]
    list_select_related = ["connector", "watermark"]
    readonly_fields = ["watermark_link", "created_at", "updated_at"]
    actions = ["backfill_holes"]

    def get_readonly_fields(self, request, obj=None):
        fixed = list(job_services.FIXED_JOB_FIELDS) if obj is not None else []
        return [*fixed, *self.readonly_fields]

    @admin.display(description="watermark position")
    def watermark_position(self, job):
        return job.watermark.position

    @admin.display(description="watermark")
    def watermark_link(self, job):
        if job.pk is None:
            return "-"
        url = reverse("admin:inventory_watermark_change", args=[job.watermark.pk])
        return format_html('<a href="{}">{} (history, correction)</a>', url, job.watermark.value)

    def save_model(self, request, obj, form, change):
        """JobForm already saved it through the service."""

    def has_delete_permission(self, request, obj=None):
        # job_delete refuses while a batch runs; say so before the confirmation page
        if obj is not None and obj.batches.filter(status=BatchStatus.RUNNING).exists():
            return False
        return super().has_delete_permission(request, obj)

    def get_deleted_objects(self, objs, request):
        return _own_delete_permission_only(self, objs, request)

    def delete_model(self, request, obj):
        job_services.job_delete(job=obj)

    def delete_queryset(self, request, queryset):
        self.run_service(request, queryset, "deleted", lambda j: job_services.job_delete(job=j))

    @service_action("job.backfill", "Backfill the holes of selected jobs (with a preview)…")
    def backfill_holes(self, request, queryset):
        """The gap report's one action, as on the dashboard and in the API: a backfill of exactly
        each job's dead, cancelled and never-planned stretches, after a preview."""
        jobs = list(queryset.select_related("connector", "watermark").order_by("name"))
        bound = "apply" in request.POST or "preview" in request.POST  # else: from the list
        form = HolesForm(request.POST if bound else None)
        valid = form.is_valid()
        if valid and "apply" in request.POST:
            data = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}
            given = {
                k: data.pop(k) for k in ("lower", "upper", "time_start", "time_end") if k in data
            }
            actor = actor_name(request.user)
            scheduled: list[str] = []
            changed: list[str] = []

            def schedule(job):
                bounds = _hole_bounds(job, **given)
                # the preview's fingerprint of this job: exactly those backfills, or none
                pinned = request.POST.get(f"fingerprint_{job.pk}") or None
                try:
                    created = gap_services.holes_backfill(
                        job=job, **data, **bounds, actor=actor, fingerprint=pinned
                    )
                except PlanChanged:
                    changed.append(job.name)
                    raise
                scheduled.extend(
                    f"{job.name}: backfill {b.pk} [{b.range_start}, {b.range_end}]" for b in created
                )

            self.run_service(request, jobs, "holes backfilled", schedule)
            if scheduled:
                self.message_user(request, "Scheduled " + "; ".join(scheduled), messages.INFO)
            if not changed:
                return None
            # the plans as they are now, beside the refusal that says how they changed
            jobs = [job for job in jobs if job.name in changed]
        given = (
            {k: form.cleaned_data.get(k) for k in ("lower", "upper", "time_start", "time_end")}
            if valid
            else {}
        )
        previews = []
        for job in jobs:
            try:
                plans = gap_services.holes_preview(job=job, **_hole_bounds(job, **given))
            except TidemarkError as exc:
                previews.append({"job": job, "error": str(exc), "plans": []})
            else:
                previews.append(
                    {
                        "job": job,
                        "plans": plans,
                        "items": sum(b.item_count for p in plans for b in p.batches),
                        "batches": sum(len(p.batches) for p in plans),
                        "fingerprint": gap_services.holes_fingerprint(job=job, plans=plans),
                    }
                )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Backfill the holes",
            "jobs": jobs,
            "previews": previews,
            "anything": any(p["plans"] for p in previews),
            "form": form,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/inventory/job_backfill_holes.html", context)


def _hole_bounds(job, *, lower=None, upper=None, time_start=None, time_end=None) -> dict:
    """The id bounds of the holes to look at: item ids as given, or the ids a time range stands
    for in this job (backfills.backfill_range_for_times, as in the API and on the dashboard)."""
    if time_start in (None, "") and time_end in (None, ""):
        return {"lower": lower, "upper": upper}
    if lower is not None or upper is not None:
        raise InvalidInput("time_start", "give item ids or times, not both")
    span = backfill_services.backfill_range(job=job, time_start=time_start, time_end=time_end)
    return {"lower": span.range_start, "upper": span.range_end + 1}


class HolesForm(forms.Form):
    lower = forms.IntegerField(required=False, label="From item id")
    upper = forms.IntegerField(required=False, label="To item id (exclusive)")
    time_start = forms.CharField(
        required=False,
        label="Or from time",
        help_text="ISO 8601 with a UTC offset: a table's read column (its value for an integer "
        "column), files registered between, a job_output's upstream commit time; not Kafka",
    )
    time_end = forms.CharField(required=False, label="To time (inclusive)")
    max_concurrency = forms.IntegerField(min_value=1, initial=1)
    priority = forms.IntegerField(initial=0, help_text="> 0 runs before incremental work")
    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}))


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
                corrections.watermark_correct(
                    job=watermark.job,
                    value=data["value"],
                    position=data["position"],
                    actor=actor_name(request.user),
                    reason=data["reason"],
                    replay=data["replay"],
                    source=WatermarkSource.ADMIN,
                )
            except TidemarkError as exc:
                _services_form_error(form, exc)
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


# ---- batches and backfills ---------------------------------------------------------------------


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
            lambda b: batch_services.batch_retry(batch_id=b.pk, actor=actor),
        )

    @service_action("batch.cancel", "Cancel selected batches")
    def cancel_batches(self, request, queryset):
        actor = actor_name(request.user)
        self.run_service(
            request,
            queryset,
            "cancelled",
            lambda b: batch_services.batch_cancel(
                batch_id=b.pk, actor=actor, reason="cancelled in the admin"
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
                lambda b: batch_services.batch_skip(batch_id=b.pk, actor=actor, reason=reason),
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
        return selectors.backfills_with_progress(super().get_queryset(request))

    def get_readonly_fields(self, request, obj=None):
        return [*(f.name for f in Backfill._meta.concrete_fields), "progress"]

    @admin.display(description="progress")
    def progress(self, backfill):
        total = getattr(backfill, "batches_total", None)
        if total is None:
            backfill = selectors.backfills_with_progress().get(pk=backfill.pk)
            total = backfill.batches_total
        return f"{backfill.batches_done}/{total} batches, {backfill.batches_dead} dead"

    def _set(self, request, queryset, status, label):
        self.run_service(
            request,
            queryset,
            label,
            lambda b: backfill_services.backfill_set_status(backfill=b, status=status),
        )

    @service_action("backfill.pause", "Pause selected backfills")
    def pause_backfills(self, request, queryset):
        self._set(request, queryset, BackfillStatus.PAUSED, "paused")

    @service_action("backfill.resume", "Resume selected backfills")
    def resume_backfills(self, request, queryset):
        self._set(request, queryset, BackfillStatus.RUNNING, "resumed")

    @service_action("backfill.cancel", "Cancel selected backfills")
    def cancel_backfills(self, request, queryset):
        self._set(request, queryset, BackfillStatus.CANCELLED, "cancelled")


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
                record = restatement_records.restatement_apply(restatement=record, actor=actor)
            except TidemarkError as exc:  # a changed plan says how (PlanChanged's message)
                self.message_user(request, f"restatement {record.pk}: {exc}", messages.ERROR)
            else:
                self.message_user(
                    request,
                    f"restatement {record.pk} applied: backfill {record.backfill_id}",
                    messages.SUCCESS,
                )


# ---- the shared backfill throttle --------------------------------------------------------------


class BackfillThrottleForm(forms.ModelForm):
    """Saves through throttle_set while validating, so its error shows on the field."""

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
            throttle_services.throttle_set(
                connector=connector, weight_per_minute=cleaned.get("weight_per_minute")
            )
        except TidemarkError as exc:
            _services_form_error(self, exc)
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
        throttle_services.throttle_set(connector=obj.connector, weight_per_minute=None)

    def delete_queryset(self, request, queryset):
        self.run_service(
            request,
            queryset.select_related("connector"),
            "removed",
            lambda t: throttle_services.throttle_set(connector=t.connector, weight_per_minute=None),
        )

"""Jobs: edited through the job services; backfilling a job's holes."""

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from inventory.actions import run
from inventory.admin.base import (
    RoleActionsMixin,
    own_delete_permission_only,
    service_action,
    services_form_error,
)
from inventory.models import BatchStatus, Job
from inventory.roles import actor_name
from inventory.services import backfills as backfill_services
from inventory.services import gaps as gap_services
from inventory.services import jobs as job_services
from inventory.services.errors import InvalidInput, PlanChanged, TidemarkError


class JobForm(forms.ModelForm):
    """Saves through job_create / job_update while validating, so that a service error shows on
    the field it names. The admin's change view runs in one transaction: all or nothing."""

    user = None  # set per request by RoleActionsMixin.get_form

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
                self.instance = run("job.create", self.user, **cleaned)
            else:
                changed = {name: cleaned[name] for name in self.changed_data if name in cleaned}
                self.instance = run("job.update", self.user, job=self.instance, **changed)
        except TidemarkError as exc:
            services_form_error(self, exc)
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
        return own_delete_permission_only(self, objs, request)

    def delete_model(self, request, obj):
        run("job.delete", request.user, job=obj)

    def delete_queryset(self, request, queryset):
        self.run_service(
            request, queryset, "deleted", lambda j: run("job.delete", request.user, job=j)
        )

    @service_action("job.backfill_holes", "Backfill the holes of selected jobs (with a preview)…")
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
                    created = run(
                        "job.backfill_holes",
                        request.user,
                        job=job,
                        **data,
                        **bounds,
                        actor=actor,
                        fingerprint=pinned,
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

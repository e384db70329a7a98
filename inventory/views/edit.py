"""Dashboard pages that create and change connectors, jobs and the shared backfill throttle.
Each one passes what the form parsed through the API's serializer and then the same service the
API calls, so a bad value gets the API's message, shown beside its field."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from inventory.actions import role_of, run
from inventory.api import serializers as api
from inventory.forms import ThrottleForm
from inventory.forms_edit import ConnectorEditForm, JobEditForm, attach_errors
from inventory.models import Connector, Job
from inventory.services.errors import TidemarkError
from inventory.views.base import page_context, require_allowed, role_required


def _save(form, serializer, call):
    """Validate `form`'s payload with the API's `serializer`, then call the service; the
    object, or None with every error attached to the form."""
    if not serializer.is_valid():
        attach_errors(form, serializer.errors)
        return None
    try:
        return call(serializer.validated_data)
    except TidemarkError as exc:
        attach_errors(form, exc)
        return None


@role_required(role_of("connector.create"))
def connector_new(request):
    require_allowed(request, "connector.create")
    form = ConnectorEditForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        saved = _save(
            form,
            api.ConnectorCreateSerializer(data=form.payload()),
            lambda data: run("connector.create", request.user, **data),
        )
        if saved:
            messages.success(request, f"Connector {saved.name} created.")
            return redirect("dashboard:connectors")
    return _editor(request, form, noun="connector", title="New connector")


@role_required(role_of("connector.update"))
def connector_edit(request, name):
    require_allowed(request, "connector.update")
    connector = get_object_or_404(Connector, name=name)
    initial = {
        k: getattr(connector, k) for k in ("name", "kind", "config", "labels", "start_after")
    }
    form = ConnectorEditForm(request.POST or None, initial=initial, editing=True)
    if request.method == "POST" and form.is_valid():
        saved = _save(
            form,
            api.ConnectorUpdateSerializer(data=form.payload()),
            lambda data: run("connector.update", request.user, connector=connector, **data),
        )
        if saved:
            messages.success(request, f"Connector {saved.name} changed.")
            return redirect("dashboard:connectors")
    return _editor(request, form, noun="connector", title=f"Connector {name}", obj=connector)


@role_required(role_of("job.create"))
def job_new(request):
    require_allowed(request, "job.create")
    initial = {"connector": request.GET.get("connector", "")[:100]}
    form = JobEditForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        saved = _save(
            form,
            api.JobWriteSerializer(data=form.payload()),
            lambda data: run("job.create", request.user, **data),
        )
        if saved:
            messages.success(request, f"Job {saved.name} created.")
            return redirect("dashboard:job", name=saved.name)
    return _editor(request, form, noun="job", title="New job")


@role_required(role_of("job.update"))
def job_edit(request, name):
    require_allowed(request, "job.update")
    job = get_object_or_404(Job.objects.select_related("connector"), name=name)
    form = JobEditForm(request.POST or None, initial=JobEditForm.initial_of(job), editing=True)
    if request.method == "POST" and form.is_valid():
        saved = _save(
            form,
            api.JobWriteSerializer(job, data=form.payload(), partial=True),
            lambda data: run("job.update", request.user, job=job, **data),
        )
        if saved:
            messages.success(request, f"Job {saved.name} changed.")
            return redirect("dashboard:job", name=saved.name)
    return _editor(request, form, noun="job", title=f"Job {name}", obj=job)


def _editor(request, form, *, noun, title, obj=None):
    context = {"form": form, "noun": noun, "title": title, "obj": obj, **page_context(request)}
    return render(request, "inventory/edit.html", context, status=400 if form.errors else 200)


@require_POST
@role_required(role_of("throttle.set"))
def throttle_set(request):
    require_allowed(request, "throttle.set")
    form = ThrottleForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Throttle not changed: {form.errors.as_text()}")
        return redirect("dashboard:backfills")
    name = form.cleaned_data["connector"]
    connector = Connector.objects.filter(name=name).first() if name else None
    if name and connector is None:
        messages.error(request, f"Throttle not changed: connector: there is no connector {name!r}")
        return redirect("dashboard:backfills")
    budget = form.cleaned_data["weight_per_minute"]
    try:
        run("throttle.set", request.user, connector=connector, weight_per_minute=budget)
    except TidemarkError as exc:
        messages.error(request, f"Throttle not changed: {exc}")
    else:
        scope = f"connector {name}" if name else "all connectors"
        messages.success(
            request,
            f"Shared throttle for {scope}: "
            + (f"{budget:,} weight/min." if budget else "removed."),
        )
    return redirect("dashboard:backfills")

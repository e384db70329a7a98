"""Dashboard pages: thin views over selectors (reads) and services (writes).

Every page needs a login and the viewer role (a user in no role group sees nothing, as in the
API); every change needs the operator role (skipping a batch: admin), a POST
with a CSRF token, and redirects after it.
"""

from datetime import timedelta
from functools import partial, wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Case, Value, When
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from inventory import selectors, selectors_coverage, selectors_health
from inventory.actions import ACTIONS, allowed, allowed_keys, role_of
from inventory.forms import BackfillForm, GapRangeForm, HolesBackfillForm, ReasonForm, ThrottleForm
from inventory.models import (
    Backfill,
    BackfillStatus,
    Batch,
    BatchKind,
    BatchStatus,
    Connector,
    Job,
)
from inventory.roles import ADMIN, VIEWER, actor_name, has_role
from inventory.services import backfills as backfill_services
from inventory.services import connectors as connector_services
from inventory.services import gaps as gap_services
from inventory.services import jobs as job_services
from inventory.services import lifecycle as batch_services
from inventory.services import scheduling as scheduling_services
from inventory.services.errors import PlanChanged, TidemarkError
from inventory.services.secrets import mask
from inventory.sources import discovery
from inventory.templatetags.human import weight as human_weight


def role_required(role):
    def decorate(view):
        @wraps(view)
        @login_required
        def wrapper(request, *args, **kwargs):
            if not has_role(request.user, role):
                raise PermissionDenied(f"this needs the {role} role")
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def _require(request, key: str) -> None:
    """Refuse unless the user holds the role inventory/actions.py declares for `key`."""
    if key not in ACTIONS:
        raise PermissionDenied(f"unknown action {key!r}")
    if not allowed(request.user, key):
        raise PermissionDenied(f"{key} needs the {role_of(key)} role")


def _page_context(request):
    return {
        # every action button asks this ("batch.skip" in allowed_actions, with
        # data-action="batch.skip" on its form): the roles of inventory/actions.py, as _require
        "allowed_actions": allowed_keys(request.user),
        "can_admin": has_role(request.user, ADMIN),  # the header's link to the admin site
    }


OVERVIEW_PAGE = 50  # job rows per overview page
ALERT_STRIP = 10  # alerts shown at the top; the rest are counted by kind
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@require_GET
@role_required(VIEWER)
def overview(request):
    rows = selectors_health.job_rows()
    query = request.GET.get("q", "")[:100]
    state = request.GET.get("state", "")
    state = state if state in selectors_health.STATES else ""
    shown = selectors_health.rows_filter(rows, query=query, state=state)
    page = Paginator(shown, OVERVIEW_PAGE).get_page(request.GET.get("page"))
    selectors_health.rows_detail(page.object_list)
    alerts = sorted(selectors_health.alerts(rows), key=lambda a: SEVERITY_ORDER[a.severity])
    kinds: dict[str, int] = {}
    for alert in alerts[ALERT_STRIP:]:
        label = alert.kind.replace("_", " ")
        kinds[label] = kinds.get(label, 0) + 1
    context = {
        "jobs": page,
        "total_jobs": len(rows),
        "query": query,
        "state_filter": state,
        "states": selectors_health.state_counts(rows),
        "alerts": alerts,
        "alerts_shown": alerts[:ALERT_STRIP],
        "alerts_more": max(len(alerts) - ALERT_STRIP, 0),
        "alert_kinds": kinds,
        "refresh_url": request.get_full_path(),
        "reaper": selectors.reaper_status(),
        "connector_states": selectors.connector_state_counts(),
        **_page_context(request),
    }
    template = "inventory/_overview_body.html" if _htmx(request) else "inventory/overview.html"
    return render(request, template, context)


BATCH_PAGE = 25


@require_GET
@role_required(VIEWER)
def job_detail(request, name):
    job = get_object_or_404(Job.objects.select_related("connector", "watermark"), name=name)
    history = list(selectors.watermark_history(job=job)[:200])
    counts = selectors.job_batch_counts(job=job)
    coverage = selectors_coverage.job_coverage(job=job)
    restatements = list(selectors_coverage.job_restatements(job=job)[:RESTATEMENTS_SHOWN])
    rates = selectors_health.jobs_rates(job.pk).get(job.pk) or selectors_health.JobRates()
    lag = selectors.job_lag(job=job)
    context = {
        "job": job,
        "lag": lag,
        "time_lag": selectors_health.time_lag(job),
        "eta": selectors_health.eta(lag.items if lag else None, rates),
        "rates": rates,
        "blocker": selectors.job_blocker(job=job),
        "counts": counts,
        "coverage": coverage,
        **_restated_context(coverage, restatements),
        "history": history,
        "history_points": selectors.watermark_chart_points(job=job, events=history),
        "config": mask(
            {
                "processor": job.processor,
                "params": job.params,
                "sink": job.sink,
                "batch_weight": job.batch_weight,
                "max_items": job.max_items,
                "max_attempts": job.max_attempts,
                "retry_backoff_seconds": job.retry_backoff_seconds,
                "lease_seconds": job.lease_seconds,
                "schedule_seconds": job.schedule_seconds,
                "schedule_cron": job.schedule_cron,
                "max_concurrency": job.max_concurrency,
                "executor": job.executor,
                "start_position": job.start_position,
                "restatements": job.restatements,
            }
        ),
        **_batches_context(request, job, counts),
        **_page_context(request),
    }
    return render(request, "inventory/job_detail.html", context)


RESTATEMENTS_SHOWN = 50


def _restated_context(coverage, restatements) -> dict:
    """Restated ranges beside the coverage strip's holes, and the job's restatements listed."""
    restated = selectors_coverage.restated_strip(coverage, restatements)
    return {
        "restatements": restatements,
        "restated": restated,
        "restated_states": sorted({r["state"] for r in restated}),
    }


def _batches_context(request, job, counts) -> dict:
    status = request.GET.get("status", "")
    kind = request.GET.get("kind", "")
    batches = Batch.objects.filter(job=job)
    if status in BatchStatus.values:
        batches = batches.filter(status=status)
    if kind in BatchKind.values:
        batches = batches.filter(kind=kind)
    page = Paginator(batches.order_by("-id"), BATCH_PAGE).get_page(request.GET.get("page"))
    bounds = selectors.batches_item_bounds(job=job, batches=page.object_list)
    for batch in page.object_list:
        batch.items_bounds = bounds.get(batch.pk)
    return {
        "batches": page,
        "status_filter": status,
        "kind_filter": kind,
        "statuses": BatchStatus.values,
        "kinds": BatchKind.values,
        # htmx polls the table only while something can still change
        "live": bool(counts.get(BatchStatus.RUNNING) or counts.get(BatchStatus.QUEUED)),
    }


@require_GET
@role_required(VIEWER)
def job_batches_partial(request, name):
    job = get_object_or_404(Job, name=name)
    context = {"job": job, **_batches_context(request, job, selectors.job_batch_counts(job=job))}
    return render(request, "inventory/_batches_table.html", context)


@require_GET
@role_required(VIEWER)
def job_gaps(request, name):
    job = get_object_or_404(Job.objects.select_related("connector", "watermark"), name=name)
    form = GapRangeForm(request.GET or None)
    bounds = form.cleaned_data if form.is_valid() else {}
    bounds = {k: v for k, v in bounds.items() if v is not None}
    coverage = selectors_coverage.job_coverage(job=job, **bounds)
    gaps = [
        seg
        for seg in coverage.segments
        if seg.state in selectors_coverage.GAP_STATES and seg.items > 0
    ]
    restatements = list(selectors_coverage.job_restatements(job=job, **bounds)[:RESTATEMENTS_SHOWN])
    context = {
        "job": job,
        "form": form,
        "coverage": coverage,
        **_restated_context(coverage, restatements),
        "gaps": gaps,
        "holes": selectors_coverage.holes_to_backfill(gaps),
        "bounds": bounds,
        **_page_context(request),
    }
    return render(request, "inventory/job_gaps.html", context)


@require_POST
@role_required(role_of("job.backfill"))
def job_gaps_backfill(request, name):
    job = get_object_or_404(Job.objects.select_related("connector", "watermark"), name=name)
    form = HolesBackfillForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Invalid input: {form.errors.as_text()}")
        return redirect("dashboard:job-gaps", name=job.name)
    data = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}
    preview = data.pop("preview", False)
    if preview:
        try:
            plans = gap_services.holes_preview(
                job=job,
                **{
                    k: data[k] for k in ("lower", "upper", "batch_weight", "max_items") if k in data
                },
            )
        except TidemarkError as exc:
            return render(request, "inventory/_holes_preview.html", {"error": str(exc)})
        context = {
            "plans": plans,
            "job": job,
            "fingerprint": gap_services.holes_fingerprint(job=job, plans=plans),
        }
        return render(request, "inventory/_holes_preview.html", context)
    try:
        created = gap_services.holes_backfill(job=job, **data, actor=actor_name(request.user))
    except TidemarkError as exc:  # the holes changed since the preview, among others: say how
        messages.error(request, str(exc))
        return redirect("dashboard:job-gaps", name=job.name)
    messages.success(
        request,
        "Scheduled "
        + ", ".join(f"backfill {b.pk} [{b.range_start}, {b.range_end}]" for b in created),
    )
    return redirect("dashboard:backfills")


@require_POST
@role_required(role_of("job.run"))
def job_run_now(request, name):
    job = get_object_or_404(Job.objects.select_related("connector"), name=name)
    try:
        outcome = scheduling_services.job_run_now(job=job)
    except TidemarkError as exc:
        messages.error(request, str(exc))
        return redirect("dashboard:job", name=job.name)
    if outcome.reason:
        messages.warning(request, f"Nothing planned: {outcome.reason}")
    else:
        messages.success(
            request,
            f"Planned {len(outcome.planned)} batch(es), dispatched {len(outcome.dispatched)}.",
        )
    return redirect("dashboard:job", name=job.name)


@require_POST
@login_required
def job_pause_resume(request, name, action):
    job = get_object_or_404(Job, name=name)
    if action not in ("pause", "resume"):
        raise PermissionDenied(f"unknown action {action!r}")
    _require(request, f"job.{action}")
    _act(
        request,
        lambda: job_services.job_set_paused(job=job, paused=action == "pause"),
        f"{action}d {name}",
    )
    return redirect("dashboard:job", name=job.name)


CONNECTOR_PAGE = 100
# the connectors page's order: those that hold work back first
CONNECTOR_ORDER = ("waiting", "paused", "active", "completed")


@require_GET
@role_required(VIEWER)
def connectors(request):
    query = request.GET.get("q", "")[:100].strip()
    state = request.GET.get("state", "")
    state = state if state in CONNECTOR_ORDER else ""
    rows = Connector.objects.all()
    if query:
        rows = rows.filter(name__icontains=query)
    if state:
        rows = rows.filter(state=state)
    rank = Case(
        *(When(state=name, then=Value(i)) for i, name in enumerate(CONNECTOR_ORDER)),
        default=Value(len(CONNECTOR_ORDER)),
    )
    rows = selectors.connectors_with_rows(rows.order_by(rank, "name"))
    page = Paginator(rows, CONNECTOR_PAGE).get_page(request.GET.get("page"))
    context = {
        "connectors": page,
        "query": query,
        "state_filter": state,
        "states": selectors.connector_state_counts(),
        **_page_context(request),
    }
    return render(request, "inventory/connectors.html", context)


@require_POST
@login_required
def connector_action(request, name, action):
    connector = get_object_or_404(Connector, name=name)
    actor = request.user.get_username()
    actions = {
        "pause": (partial(connector_services.connector_pause, actor=actor), f"paused {name}"),
        "resume": (partial(connector_services.connector_resume, actor=actor), f"resumed {name}"),
        "discover": (
            discovery.connector_discover_now,
            lambda new: f"scanned {name}: {new} new file(s) registered",
        ),
    }
    if action not in actions:
        raise PermissionDenied(f"unknown action {action!r}")
    _require(request, f"connector.{action}")
    service, done = actions[action]
    _act(request, lambda: service(connector=connector), done)
    if _htmx(request):
        # the row alone, with the outcome next to it (no full reload)
        connector = selectors.connectors_with_rows(Connector.objects.filter(pk=connector.pk))[0]
        notes = [str(m) for m in messages.get_messages(request)]
        context = {"connector": connector, "notes": notes, **_page_context(request)}
        return render(request, "inventory/_connector_row.html", context)
    return redirect("dashboard:connectors")


@role_required(VIEWER)
def backfills(request):
    form = BackfillForm(request.POST or None)
    plan_changed = None
    if request.method == "POST":
        _require(request, "job.backfill")
        if form.is_valid():
            data = form.cleaned_data
            try:
                backfill = backfill_services.backfill_create(
                    **_backfill_args(data),
                    max_concurrency=data["max_concurrency"],
                    priority=data["priority"],
                    reason=data["reason"],
                    actor=actor_name(request.user),
                    fingerprint=data.get("fingerprint") or None,
                )
            except PlanChanged as exc:
                plan_changed = _plan_changed(form, exc)
            except TidemarkError as exc:
                _form_error(form, exc)
            else:
                messages.success(request, f"Backfill {backfill.pk} scheduled.")
                return redirect("dashboard:backfills")
    context = {
        "form": form,
        "plan_changed": plan_changed,
        "throttle_form": ThrottleForm(),
        **_time_basis(form),
        **_backfills_context(),
        **_page_context(request),
    }
    if request.method == "GET" and _htmx(request):
        return render(request, "inventory/_backfills_list.html", context)
    return render(request, "inventory/backfills.html", context)


def _backfills_context() -> dict:
    rows = list(selectors.backfills_with_progress().order_by("-id")[:100])
    rates = selectors_health.jobs_rates(job_ids=sorted({row.job_id for row in rows}))
    for row in rows:
        rate = rates.get(row.job_id)
        left = row.weight_total - row.weight_done
        per_second = rate.weight_per_second if rate else 0
        row.eta = timedelta(seconds=round(left / per_second)) if left and per_second > 0 else None
        row.weight_pct = 100 * row.weight_done / row.weight_total if row.weight_total else 100
        row.batches_pct = 100 * row.batches_done / row.batches_total if row.batches_total else 100
    return {
        "backfills": rows,
        "live": any(row.status == BackfillStatus.RUNNING for row in rows),
        "throttles": selectors.backfill_throttles(),
    }


@require_POST
@role_required(role_of("job.backfill"))  # the live preview of the scheduling form
def backfill_preview(request):
    form = BackfillForm(request.POST)
    plan = span = None
    if form.is_valid():
        args = _backfill_args(form.cleaned_data)
        budget = {k: args.pop(k) for k in ("batch_weight", "max_items")}
        try:
            span = backfill_services.backfill_range(**args)  # the ids a time range stands for
            plan = backfill_services.backfill_preview(
                job=args["job"], range_start=span.range_start, range_end=span.range_end, **budget
            )
        except TidemarkError as exc:
            _form_error(form, exc)
    context = {"form": form, "plan": plan, "span": span, **_time_basis(form)}
    if plan:
        job = form.cleaned_data["job"]
        summary = backfill_services.plan_summary(job=job, span=span, plan=plan)
        context.update(fingerprint=summary["fingerprint"], previewed=_plan_text(summary))
        budget = form.cleaned_data.get("batch_weight") or job.batch_weight
        total_weight = sum(p.weight for p in plan)
        throttle = selectors.backfill_throttle_for(job=job)
        duration = selectors.backfill_duration_estimate(
            job=job, plan=plan, concurrency=form.cleaned_data["max_concurrency"], throttle=throttle
        )
        context.update(
            total_weight=total_weight,
            total_items=sum(p.item_count for p in plan),
            max_weight=max(p.weight for p in plan),
            budget=budget,
            histogram=selectors.weight_histogram(
                plan, budget=budget, unit=job.connector.weight_unit
            ),
            duration=duration,
            throttle=throttle,
            weight_unit=job.connector.weight_unit,
        )
    return render(request, "inventory/_backfill_preview.html", context)


@require_POST
@login_required
def backfill_action(request, pk, action):
    backfill = get_object_or_404(Backfill, pk=pk)
    statuses = {
        "pause": BackfillStatus.PAUSED,
        "resume": BackfillStatus.RUNNING,
        "cancel": BackfillStatus.CANCELLED,
    }
    if action not in statuses:
        raise PermissionDenied(f"unknown action {action!r}")
    _require(request, f"backfill.{action}")
    _act(
        request,
        lambda: backfill_services.backfill_set_status(backfill=backfill, status=statuses[action]),
        f"backfill {pk}: {action}",
    )
    return redirect("dashboard:backfills")


ITEMS_PAGE = 100


@require_GET
@role_required(VIEWER)
def batch_detail(request, pk):
    batch = get_object_or_404(Batch.objects.select_related("job__connector", "backfill"), pk=pk)
    # shown, never saved: what a worker reported, with any credential in it masked
    batch.error, batch.result = mask(batch.error), mask(batch.result)
    attempts = list(batch.attempts.order_by("number"))
    for attempt in attempts:
        attempt.error = mask(attempt.error)
        attempt.duration = attempt.finished_at - attempt.started_at if attempt.finished_at else None
    page_number = _positive_int(request.GET.get("page"), 1)
    items = selectors.batch_items(
        batch=batch, offset=(page_number - 1) * ITEMS_PAGE, limit=ITEMS_PAGE + 1
    )
    context = {
        "batch": batch,
        "items_bounds": selectors.batch_item_bounds(batch=batch),
        "attempts": attempts,
        "items": items[:ITEMS_PAGE],
        "items_page": page_number,
        "items_more": len(items) > ITEMS_PAGE,
        "items_pages": max((batch.item_count + ITEMS_PAGE - 1) // ITEMS_PAGE, 1),
        "error_summary": selectors.error_summary(batch.error),
        "metrics": selectors.result_metrics(batch.result),
        "reason_form": ReasonForm(),
        "can_skip": batch.status == BatchStatus.DEAD,
        **_page_context(request),
    }
    return render(request, "inventory/batch_detail.html", context)


@require_POST
@login_required
def batch_action(request, pk, action):
    batch = get_object_or_404(Batch, pk=pk)
    actor = actor_name(request.user)
    reason = request.POST.get("reason", "")
    actions = {
        "retry": lambda: batch_services.batch_retry(batch_id=pk, actor=actor),
        "cancel": lambda: batch_services.batch_cancel(batch_id=pk, actor=actor, reason=reason),
        "skip": lambda: batch_services.batch_skip(batch_id=pk, actor=actor, reason=reason),
    }
    if action not in actions:
        raise PermissionDenied(f"unknown action {action!r}")
    _require(request, f"batch.{action}")
    call = actions[action]
    _act(request, call, f"batch {batch.pk}: {action}")
    return redirect("dashboard:batch", pk=batch.pk)


def _htmx(request) -> bool:
    return request.headers.get("HX-Request") == "true"


def _positive_int(value, default: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if number > 0 else default


def _act(request, call, done_message):
    """Run a service call; its error or `done_message` (text, or a function of the result)."""
    try:
        result = call()
    except TidemarkError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done_message(result) if callable(done_message) else done_message)


def _backfill_args(data):
    """The pair the form's switch chose (the other pair's inputs are ignored, not refused)."""
    pair = ("time_start", "time_end") if data.get("by") == "time" else ("range_start", "range_end")
    return {
        "job": data["job"],
        **{field: data.get(field) for field in pair},
        "batch_weight": data.get("batch_weight"),
        "max_items": data.get("max_items"),
    }


def _plan_changed(form, exc: PlanChanged) -> dict:
    """The plan changed between the preview and the submit: say how, and pin the plan as it is
    now, so that scheduling again runs that one (never another plan silently)."""
    now = exc.plan
    form.data = form.data.copy()
    form.data["fingerprint"] = now["fingerprint"]
    form.data["previewed"] = _plan_text(now)
    previewed = form.cleaned_data.get("previewed") or "(not shown)"
    form.add_error(
        None,
        f"The plan changed since the preview: previewed {previewed} (fingerprint "
        f"{form.cleaned_data['fingerprint']}), now {_plan_text(now)} (fingerprint "
        f"{now['fingerprint']}). Nothing was scheduled; schedule again to run the plan below.",
    )
    return now


def _plan_text(plan: dict) -> str:
    return (
        f"{plan['batch_count']} batch(es), {plan['total_items']} items, weight "
        f"{human_weight(plan['total_weight'], plan.get('weight_unit', ''))} over ids "
        f"{plan['range_start']}..{plan['range_end']}"
    )


def _time_basis(form) -> dict:
    """What "by time" means for the form's job, or why it has no times: the switch's note."""
    job = form.cleaned_data.get("job") if hasattr(form, "cleaned_data") else None
    if job is None:
        return {}
    try:
        return {"time_basis": backfill_services.backfill_time_basis(job.connector)}
    except TidemarkError as exc:
        return {"time_basis_refused": exc.message}


def _form_error(form, exc):
    field = getattr(exc, "field", None)
    if field == "range_start" and form.cleaned_data.get("by") == "time":
        field = "time_start"  # no item in a time range: shown beside the time inputs
    form.add_error(field if field in form.fields else None, getattr(exc, "message", str(exc)))

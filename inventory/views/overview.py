"""The overview: jobs with their state and lag, the alerts on top."""

from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_GET

from inventory import selectors, selectors_alerts, selectors_health
from inventory.roles import VIEWER
from inventory.views.base import is_htmx, page_context, role_required

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
    alerts = sorted(selectors_alerts.alerts(rows), key=lambda a: SEVERITY_ORDER[a.severity])
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
        **page_context(request),
    }
    template = "inventory/_overview_body.html" if is_htmx(request) else "inventory/overview.html"
    return render(request, template, context)

"""The overview: jobs with their state and lag, the alerts on top.

Paged in SQL (selectors_health.Health): one read of job_health gives the counts by state, the
page's jobs and the alert strip's; only those jobs get rows (and their lag read), so beyond that
one pass over the jobs' states the page costs its rows."""

from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_GET

from inventory import selectors, selectors_alerts, selectors_freshness, selectors_health
from inventory.bounds import INT
from inventory.roles import VIEWER
from inventory.views.base import is_htmx, page_context, role_required

OVERVIEW_PAGE = 50  # job rows per overview page
ALERT_STRIP = 10  # alerts shown at the top; the rest are counted by kind


class _HealthPages:
    """What a Paginator pages: the matching jobs' count, and a slice of them built from SQL."""

    def __init__(self, health, *, query: str, connector: str, state: str, count: int):
        self.health, self.query, self.state, self._count = health, query, state, count
        self.connector = connector

    def count(self) -> int:
        return self._count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, key: slice) -> list:
        start, stop = key.start or 0, key.stop if key.stop is not None else self._count
        rows = self.health.page(
            query=self.query,
            connector=self.connector,
            state=self.state,
            limit=max(stop - start, 0),
            offset=start,
        )
        selectors_health.rows_detail(rows)
        return rows


def _page_number(value) -> int:
    # past the last page reads the last page; beyond INT the offset would not fit a bigint
    try:
        return min(max(int(value), 1), INT)
    except (TypeError, ValueError):
        return 1


@require_GET
@role_required(VIEWER)
def overview(request):
    query = request.GET.get("q", "")[:100]
    # one connector's jobs (the connectors page links its job count here): its exact name
    connector = request.GET.get("connector", "")[:100]
    state = request.GET.get("state", "")
    state = state if state in selectors_health.STATES else ""
    # the counts, the page's jobs and the alert strip's jobs: one read of job_health (a page
    # number past the end reads once more, for the last page)
    health = selectors_health.Health(
        query=query,
        connector=connector,
        state=state,
        limit=OVERVIEW_PAGE,
        offset=(_page_number(request.GET.get("page")) - 1) * OVERVIEW_PAGE,
        alert_limit=ALERT_STRIP,
    )
    states, matching = health.counts()
    shown = matching.get(state, 0) if state else sum(matching.values())
    pages = _HealthPages(health, query=query, connector=connector, state=state, count=shown)
    page = Paginator(pages, OVERVIEW_PAGE).get_page(request.GET.get("page"))
    strip = selectors_alerts.alerts_page(limit=ALERT_STRIP, health=health)
    kinds: dict[str, int] = {}
    for kind, n in strip.by_kind.items():
        n -= sum(1 for alert in strip.alerts if alert.kind == kind)
        if n > 0:
            kinds[kind.replace("_", " ")] = n
    context = {
        "jobs": page,
        "total_jobs": sum(states.values()),
        "query": query,
        "connector_filter": connector,
        "state_filter": state,
        "states": states,
        "alerts": strip.alerts,
        "alerts_shown": strip.alerts,
        "alerts_more": max(strip.count - len(strip.alerts), 0),
        "alert_kinds": kinds,
        "refresh_url": request.get_full_path(),
        "reaper": selectors.reaper_status(),
        "connector_states": selectors.connector_state_counts(),
        "freshness_missing": selectors_freshness.jobs_missing_target(),
        **page_context(request),
    }
    template = "inventory/_overview_body.html" if is_htmx(request) else "inventory/overview.html"
    return render(request, template, context)

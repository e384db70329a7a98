"""The connectors' page and their actions (pause, resume, discover now)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Case, Value, When
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from inventory import selectors
from inventory.actions import run
from inventory.models import Connector
from inventory.roles import VIEWER
from inventory.views.base import act, is_htmx, page_context, require_allowed, role_required

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
        **page_context(request),
    }
    return render(request, "inventory/connectors.html", context)


@require_POST
@login_required
def connector_action(request, name, action):
    connector = get_object_or_404(Connector, name=name)
    actor = request.user.get_username()
    actions = {  # the arguments beside the connector, and what the page says when done
        "pause": ({"actor": actor}, f"paused {name}"),
        "resume": ({"actor": actor}, f"resumed {name}"),
        "discover": ({}, lambda new: f"scanned {name}: {new} new file(s) registered"),
    }
    if action not in actions:
        raise PermissionDenied(f"unknown action {action!r}")
    require_allowed(request, f"connector.{action}")
    arguments, done = actions[action]
    key = f"connector.{action}"
    act(request, lambda: run(key, request.user, connector=connector, **arguments), done)
    if is_htmx(request):
        # the row alone, with the outcome next to it (no full reload)
        connector = selectors.connectors_with_rows(Connector.objects.filter(pk=connector.pk))[0]
        notes = [str(m) for m in messages.get_messages(request)]
        context = {"connector": connector, "notes": notes, **page_context(request)}
        return render(request, "inventory/_connector_row.html", context)
    return redirect("dashboard:connectors")

"""The pipeline graph page: every connector, job and sink, and what feeds what (selectors_graph)."""

from urllib.parse import urlencode

from django.shortcuts import render
from django.views.decorators.http import require_GET

from inventory import selectors_graph
from inventory.roles import VIEWER
from inventory.views.base import page_context, role_required


@require_GET
@role_required(VIEWER)
def pipeline_graph(request):
    query = request.GET.get("q", "")[:100]
    expand = [name[:100] for name in request.GET.getlist("expand")][:200]
    graph = selectors_graph.pipeline_graph(query=query, expand=expand)
    for node in graph.layout.nodes:
        if node.kind == "group":  # opens this connector's jobs, keeping the search
            connector = node.id.split(":", 1)[1]
            node.url = "?" + urlencode({"q": graph.query, "expand": [*expand, connector]}, True)
    context = {
        "graph": graph,
        "query": graph.query,
        "expand_all": "?" + urlencode({"q": graph.query, "expand": "*"}),
        **page_context(request),
    }
    return render(request, "inventory/graph.html", context)

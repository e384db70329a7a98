"""The pipeline graph: connectors -> jobs -> sinks -> the job_output connectors reading them ->
their jobs, and the `start_after` waits between connectors, each node with its state and lag.

Read in a fixed number of queries whatever the number of jobs: the connectors, the jobs' sinks,
and job_health for every job's state and lag (selectors_health.Health.rows; a job reading a meta
table in place or another job's commits counts its lag in its own table, as on the overview).
Placed by graph_layout.py and drawn by the page as SVG.

A large graph stays usable: a search keeps the nodes whose name contains it and their
neighbours, and a connector's jobs are collapsed into one node (coloured by its worst job) when
more than EXPAND_LIMIT jobs would be drawn, unless the page asks to expand it."""

from dataclasses import dataclass, field

from inventory import links
from inventory.graph_layout import Edge, Layout, Node, layout
from inventory.models import Connector, Job
from inventory.selectors_health import Health, JobRow
from inventory.sources.registry import kind_for
from inventory.templatetags.human import count, duration

# more jobs than this drawn at once: connectors with several jobs start collapsed
EXPAND_LIMIT = 60
# the colours, worst first (a collapsed connector takes its worst job's)
STATES = ("blocked", "behind", "waiting", "paused", "current")
# job_health's state (selectors_health.STATES) -> the graph's colour
JOB_STATE = {
    "blocked": "blocked",
    "failing": "blocked",
    "unreadable": "blocked",
    "late": "behind",
    "catching_up": "behind",
    "paused": "paused",
    "current": "current",
}
CONNECTOR_STATE = {
    "active": "current",
    "completed": "current",
    "paused": "paused",
    "waiting": "waiting",
}


@dataclass
class Graph:
    layout: Layout
    query: str = ""
    jobs: int = 0  # every job, whatever is shown
    shown_jobs: int = 0  # the jobs drawn as their own node
    collapsed: list[str] = field(default_factory=list)  # connectors drawn as one node
    legend: tuple = STATES


def pipeline_graph(*, query: str = "", expand: list[str] | None = None) -> Graph:
    """The graph of every connector, job and sink; `query` keeps the nodes whose name contains
    it and their neighbours; `expand` names the connectors whose jobs are drawn one by one
    ("*": all), the others are collapsed when more than EXPAND_LIMIT jobs would be drawn."""
    needle = query.strip().lower()
    expand = expand or []
    connectors = list(
        Connector.objects.values_list("name", "kind", "state", "start_after", "labels", "config")
    )
    jobs = list(Job.objects.values_list("id", "name", "connector__name", "sink"))
    health = {row.id: row for row in Health().rows()}

    nodes: dict[str, Node] = {}
    edges: list[Edge] = []
    for name, kind, state, _, _, _ in connectors:
        nodes[f"c:{name}"] = Node(
            id=f"c:{name}",
            kind="connector",
            label=name,
            state=CONNECTOR_STATE.get(state, "current"),
            detail=f"{kind.replace('_', ' ')} connector"
            + ("" if state == "active" else f", {state}"),
            title=f"connector {name}: {state}",
            url=f"{links.link('dashboard:connectors')}?q={name}#connector-{name}",
        )
    sink_of: dict[str, str] = {}  # job name -> its sink's node id
    for pk, name, connector, sink in jobs:
        row = health.get(pk)
        state, title = _job_state(row, connectors_state=nodes[f"c:{connector}"].state)
        nodes[f"j:{name}"] = Node(
            id=f"j:{name}",
            kind="job",
            label=name,
            state=state,
            detail=_lag_text(row),
            title=f"job {name}: {title}",
            url=links.link("dashboard:job", name),
        )
        edges.append(Edge(f"c:{connector}", f"j:{name}"))
        sink_id = _sink_node(nodes, sink, writer=name)
        if sink_id:
            sink_of[name] = sink_id
            edges.append(Edge(f"j:{name}", sink_id))
    for name, kind, _, start_after, _, config in connectors:
        upstream = kind_for(kind, config).upstream_job(config)
        if upstream:
            source = sink_of.get(upstream, f"j:{upstream}")
            edges.append(Edge(source, f"c:{name}"))
        if start_after:
            for other, _, _, _, labels, _ in connectors:
                if other != name and (other == start_after or start_after in (labels or [])):
                    edges.append(Edge(f"c:{other}", f"c:{name}", kind="start_after"))

    if needle:
        keep = {
            nid
            for nid, n in nodes.items()
            if needle in (nid if n.kind == "sink" else n.label).lower()  # a sink: its whole path
        }
        keep |= {e.target for e in edges if e.source in keep} | {
            e.source for e in edges if e.target in keep
        }
        nodes = {nid: n for nid, n in nodes.items() if nid in keep}
        edges = [e for e in edges if e.source in nodes and e.target in nodes]

    shown_jobs = sum(1 for n in nodes.values() if n.kind == "job")
    collapsed: list[str] = []
    if shown_jobs > EXPAND_LIMIT and "*" not in expand:
        job_connector = {f"j:{name}": connector for _, name, connector, _ in jobs}
        per_connector: dict[str, list[str]] = {}
        for nid in nodes:
            if nid in job_connector:
                per_connector.setdefault(job_connector[nid], []).append(nid)
        for connector, members in sorted(per_connector.items()):
            if len(members) > 1 and connector not in expand:
                _collapse(nodes, edges, connector, members)
                collapsed.append(connector)
                shown_jobs -= len(members)
        edges = _dedupe(edges, nodes)
    placed = layout(list(nodes.values()), edges)
    return Graph(
        layout=placed,
        query=query.strip(),
        jobs=len(jobs),
        shown_jobs=shown_jobs,
        collapsed=collapsed,
    )


def _job_state(row: JobRow | None, *, connectors_state: str) -> tuple[str, str]:
    if row is None:
        return "current", "current"
    if row.state == "connector":
        colour = "paused" if connectors_state == "paused" else "waiting"
        return colour, f"its connector is {'paused' if colour == 'paused' else 'waiting'}"
    return JOB_STATE.get(row.state, "behind"), row.state.replace("_", " ")


def _lag_text(row: JobRow | None) -> str:
    if row is None or row.lag is None:
        return "lag unreadable"
    if row.lag.items == 0:
        return "caught up"
    text = f"{count(row.lag.items, 'item')} behind"
    if row.time_lag is not None:
        text += f" · {duration(row.time_lag)}"
    return text


def _sink_node(nodes: dict[str, Node], sink, *, writer: str) -> str:
    if not isinstance(sink, dict) or not sink.get("kind"):
        return ""
    sink_kind = str(sink["kind"])
    where = str(sink.get("table") or sink.get("path") or "")
    nid = f"s:{sink_kind}:{where}"
    if nid not in nodes:
        detail = f"{sink_kind} sink"
        if sink_kind == "files":
            detail += f" ({sink.get('format') or 'parquet'})"
        nodes[nid] = Node(
            id=nid,
            kind="sink",
            label=_tail(where) or sink_kind,
            detail=detail,
            title=f"{sink_kind} sink {where}, written by {writer}",
            url=links.link("dashboard:job", writer),
        )
    return nid


def _tail(where: str, width: int = 28) -> str:
    """A sink's path or table as its node shows it: the end, where paths differ."""
    return where if len(where) <= width else "…" + where[-(width - 1) :]


def _collapse(nodes: dict[str, Node], edges: list[Edge], connector: str, members: list[str]):
    """Draw a connector's jobs as one node: their count, coloured by the worst of them."""
    states = [nodes[m].state for m in members]
    worst = min(states, key=STATES.index)
    tally = ", ".join(f"{states.count(s)} {s}" for s in STATES if s in states)
    group = f"g:{connector}"
    nodes[group] = Node(
        id=group,
        kind="group",
        label=f"{count(len(members), 'job')} of {connector}",
        state=worst,
        detail=tally,
        title=f"{len(members)} jobs of connector {connector} ({tally}); open to see each",
        url="",  # the page links it to itself with this connector expanded
    )
    inside = set(members)
    for edge in edges:
        if edge.source in inside:
            edge.source = group
        if edge.target in inside:
            edge.target = group
    for member in members:
        del nodes[member]


def _dedupe(edges: list[Edge], nodes: dict[str, Node]) -> list[Edge]:
    seen, kept = set(), []
    for edge in edges:
        key = (edge.source, edge.target, edge.kind)
        if key not in seen and edge.source != edge.target and edge.source in nodes:
            seen.add(key)
            kept.append(edge)
    return kept

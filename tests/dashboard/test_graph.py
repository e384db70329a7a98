"""The pipeline graph page: connectors -> jobs -> sinks -> the jobs reading them, and the
start_after waits, each node coloured by its state with its lag and linking to its page; a
search, collapsed connectors at scale, and a bounded number of queries."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from inventory import graph_layout, selectors_graph
from inventory.graph_layout import Edge, Node
from inventory.models import Asset, Connector, ConnectorState, Job, Watermark
from inventory.services import lifecycle
from inventory.services.connectors import connector_create
from tests.support.factories import ConnectorFactory, make_assets, make_job

pytestmark = pytest.mark.django_db


def _client(role_users, role="viewer") -> Client:
    client = Client()
    client.force_login(role_users[role])
    return client


def _nodes(html: str) -> dict[str, dict]:
    """node id -> its state, link and text, as the page's SVG draws it."""
    found = {}
    for attrs, body in re.findall(r'<a class="node ([^>]*)>(.*?)</a>', html, re.S):
        node = re.search(r'data-node="([^"]+)"', attrs).group(1)
        found[node] = {
            "state": re.search(r'data-state="([^"]*)"', attrs).group(1),
            "href": re.search(r'href="([^"]*)"', attrs).group(1).replace("&amp;", "&"),
            "class": attrs.split('"', 1)[0],
            "text": re.sub(r"<title>.*?</title>|<[^>]+>", " ", body),
        }
    return found


def _edges(html: str) -> set[tuple[str, str, str]]:
    """(source, target, kind) of every edge the page's SVG draws."""
    pattern = r'<path class="edge (\w+)" d="[^"]+" data-source="([^"]+)" data-target="([^"]+)"'
    return {(source, target, kind) for kind, source, target in re.findall(pattern, html)}


def _chain(tmp_path):
    """orders (files) -> clean -> its files sink -> clean-src (job_output) -> report -> a Delta table."""
    source = ConnectorFactory(name="orders")
    make_assets(source, [10, 10, 10])
    clean = make_job(
        connector=source,
        name="clean",
        batch_weight=10,
        sink={"kind": "files", "path": str(tmp_path / "clean-out")},
    )
    reader = connector_create(name="clean-src", kind="job_output", config={"job": "clean"})
    report = make_job(
        connector=reader, name="report", sink={"kind": "delta", "path": str(tmp_path / "report")}
    )
    return clean, report


def test_a_viewer_sees_the_graph_with_nodes_edges_links_and_state_colours(tmp_path, role_users):
    clean, report = _chain(tmp_path)
    # clean: one batch committed, two items left (behind); a paused job; a blocked job
    batch = lifecycle.batch_acquire(job=clean, worker="w")
    lifecycle.batch_succeed(batch_id=batch.id, attempt=batch.attempt)
    Job.objects.filter(pk=report.pk).update(paused=True)
    stuck = ConnectorFactory(name="stuck-src")
    make_assets(stuck, [10])
    blocked = make_job(connector=stuck, name="stuck", batch_weight=10, max_attempts=1)
    failed = lifecycle.batch_acquire(job=blocked, worker="w")
    lifecycle.batch_fail(batch_id=failed.id, attempt=failed.attempt, error={"type": "E"})
    done = ConnectorFactory(name="done-src")
    make_assets(done, [5])
    current = make_job(connector=done, name="done")
    ok = lifecycle.batch_acquire(job=current, worker="w")
    lifecycle.batch_succeed(batch_id=ok.id, attempt=ok.attempt)

    response = _client(role_users).get("/graph/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<a href="/graph/">Graph</a>' in html  # linked from the nav
    nodes = _nodes(html)
    sink = f"s:files:{tmp_path / 'clean-out'}"
    assert {"c:orders", "j:clean", sink, "c:clean-src", "j:report"} <= set(nodes)
    assert f"s:delta:{tmp_path / 'report'}" in nodes
    assert nodes["j:clean"]["state"] == "behind"
    assert "node-behind" in nodes["j:clean"]["class"]
    assert "2 items behind" in nodes["j:clean"]["text"]
    assert nodes["j:report"]["state"] == "paused"
    assert nodes["j:stuck"]["state"] == "blocked"
    assert nodes["j:done"]["state"] == "current"
    assert "caught up" in nodes["j:done"]["text"]
    assert nodes["j:clean"]["href"] == "/jobs/clean/"
    assert nodes["c:orders"]["href"] == "/connectors/?q=orders#connector-orders"
    assert nodes[sink]["href"] == "/jobs/clean/"  # a sink opens the job writing it
    assert _edges(html) >= {
        ("c:orders", "j:clean", "flow"),
        ("j:clean", sink, "flow"),
        (sink, "c:clean-src", "flow"),
        ("c:clean-src", "j:report", "flow"),
        ("j:report", f"s:delta:{tmp_path / 'report'}", "flow"),
    }
    # the columns follow the chain, left to right
    xs = {
        n: int(re.search(rf'data-node="{re.escape(n)}"[^>]*translate\((\d+) ', html).group(1))
        for n in ("c:orders", "j:clean", sink, "c:clean-src", "j:report")
    }
    assert list(xs.values()) == sorted(xs.values()) and len(set(xs.values())) == 5


def test_start_after_edges_and_waiting_connectors(role_users):
    ConnectorFactory(name="history", labels=["backfill-first"])
    live = ConnectorFactory(name="live", start_after="backfill-first", state=ConnectorState.WAITING)
    make_job(connector=live, name="live-job")
    html = _client(role_users).get("/graph/").content.decode()
    assert ("c:history", "c:live", "start_after") in _edges(html)
    nodes = _nodes(html)
    assert nodes["c:live"]["state"] == "waiting"
    assert nodes["j:live-job"]["state"] == "waiting"


def test_search_keeps_the_matches_and_their_neighbours(tmp_path, role_users):
    _chain(tmp_path)
    other = ConnectorFactory(name="unrelated")
    make_job(connector=other, name="elsewhere")
    html = _client(role_users).get("/graph/", {"q": "REPORT"}).content.decode()
    nodes = _nodes(html)
    assert set(nodes) == {"c:clean-src", "j:report", f"s:delta:{tmp_path / 'report'}"}
    assert "j:elsewhere" not in html
    none = _client(role_users).get("/graph/", {"q": "no-such-thing"}).content.decode()
    assert 'id="graph-empty"' in none and "Nothing matches" in none


def test_no_role_cannot_see_the_graph(role_users):
    client = Client()
    client.force_login(role_users["norole"])
    assert client.get("/graph/").status_code == 403
    assert Client().get("/graph/").status_code == 302  # to the login page


def _many_jobs(prefix: str, n_connectors: int, per_connector: int) -> None:
    connectors = Connector.objects.bulk_create(
        [
            Connector(name=f"{prefix}-{c:03d}", kind="files", config={"path": "/data"})
            for c in range(n_connectors)
        ]
    )
    Asset.objects.bulk_create(
        [Asset(connector=c, location=f"/data/{c.name}.parquet", weight=1) for c in connectors]
    )
    # the rows job_create writes (a job and its watermark at its start), in two statements
    jobs = Job.objects.bulk_create(
        [
            Job(connector=c, name=f"{c.name}-job-{j:03d}", batch_weight=100)
            for c in connectors
            for j in range(per_connector)
        ]
    )
    Watermark.objects.bulk_create([Watermark(job=j, type="int", position=0) for j in jobs])


def _queries(client, **params) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/graph/", params)
    assert response.status_code == 200
    # the session and user of the login are read once per request whatever the page
    return len(queries), response.content.decode()


def test_a_thousand_jobs_render_collapsed_by_connector_in_bounded_queries(role_users):
    client = _client(role_users)
    _many_jobs("few", 2, 3)
    few, _ = _queries(client)
    _many_jobs("bulk", 20, 50)  # 1,006 jobs in all
    many, html = _queries(client)
    assert many == few
    nodes = _nodes(html)
    groups = [n for n in nodes if n.startswith("g:")]
    assert len(groups) == 22 and not any(n.startswith("j:") for n in nodes)
    assert "50 jobs of bulk-007" in nodes["g:bulk-007"]["text"]
    assert "50 behind" in nodes["g:bulk-007"]["text"]
    assert nodes["g:bulk-007"]["href"] == "?q=&expand=bulk-007"
    assert 'id="expand-all"' in html

    # one connector opened: its 50 jobs, the others still collapsed, same queries
    opened, html = _queries(client, expand="bulk-007")
    assert opened == few
    nodes = _nodes(html)
    assert sum(1 for n in nodes if n.startswith("j:bulk-007-")) == 50
    assert "g:bulk-007" not in nodes and "g:bulk-008" in nodes

    # everything opened: 1,006 job nodes, still the same queries
    every, html = _queries(client, expand="*")
    assert every == few
    assert sum(1 for n in _nodes(html) if n.startswith("j:")) == 1006

    # a search opens what it finds
    _, html = _queries(client, q="bulk-003-job-01")
    found = {n for n in _nodes(html) if n.startswith("j:")}
    assert found == {f"j:bulk-003-job-01{d}" for d in range(10)}


def test_layout_columns_follow_depth_and_rows_reduce_crossings():
    nodes = [
        Node("c:a", "connector", "a"),
        Node("c:b", "connector", "b"),
        Node("j:z-from-a", "job", "z-from-a"),
        Node("j:y-from-b", "job", "y-from-b"),
        Node("s:1", "sink", "out-a"),
        Node("s:2", "sink", "out-b"),
    ]
    edges = [
        Edge("c:a", "j:z-from-a"),
        Edge("c:b", "j:y-from-b"),
        Edge("j:z-from-a", "s:2"),
        Edge("j:y-from-b", "s:1"),
        Edge("c:a", "c:b", kind="start_after"),
        Edge("c:a", "c:missing"),  # an edge to a node not drawn is left out
    ]
    placed = graph_layout.layout(nodes, edges)
    by_id = {n.id: n for n in placed.nodes}
    assert [by_id[n].column for n in ("c:a", "j:z-from-a", "s:2")] == [0, 1, 2]
    # by name the jobs and sinks would cross; ordered by their neighbours they do not
    assert by_id["j:z-from-a"].row == 0 and by_id["j:y-from-b"].row == 1
    assert by_id["s:2"].row == 0 and by_id["s:1"].row == 1
    assert len(placed.edges) == 5
    assert placed.width == 34 + 10 + 3 * 270 - 70 and placed.height == 2 * 10 + 2 * 54 - 14
    assert min(int(n.x) for n in placed.nodes) == 34  # room for the start_after bow


def test_collapsed_group_takes_its_worst_jobs_colour():
    nodes = {
        "c:x": Node("c:x", "connector", "x", state="current"),
        "j:1": Node("j:1", "job", "1", state="current"),
        "j:2": Node("j:2", "job", "2", state="blocked"),
        "j:3": Node("j:3", "job", "3", state="behind"),
    }
    edges = [Edge("c:x", f"j:{i}") for i in (1, 2, 3)]
    selectors_graph._collapse(nodes, edges, "x", ["j:1", "j:2", "j:3"])
    group = nodes["g:x"]
    assert group.state == "blocked"
    assert group.detail == "1 blocked, 1 behind, 1 current"
    assert {e.target for e in selectors_graph._dedupe(edges, nodes)} == {"g:x"}

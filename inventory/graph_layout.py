"""A layered layout for the pipeline graph (selectors_graph.py), pure Python, no database.

Columns by depth: a node's column is one past the deepest node with an edge into it (connectors
with nothing upstream in column 0, their jobs in 1, the jobs' sinks in 2, a job_output connector
reading them in 3, ...). Within a column, rows are ordered to reduce crossings: by name first,
then a few sweeps that sort each column by the mean row of its neighbours in the column before
(downward) and after (upward), the barycenter heuristic. Edges that do not go forward (the
dashed `start_after` edges between connectors) take no part in the columns.
"""

from dataclasses import dataclass, field

NODE_WIDTH = 200
NODE_HEIGHT = 40
COLUMN_GAP = 70
ROW_GAP = 14
MARGIN = 10
LEFT = 34  # room left of the first column for the start_after bows
SWEEPS = 4


@dataclass
class Node:
    id: str
    kind: str  # connector, job, group (a connector's jobs collapsed), sink
    label: str
    state: str = ""  # current, behind, blocked, paused, waiting ("" for sinks)
    detail: str = ""  # the second line: its lag, its kind
    title: str = ""  # the tooltip: the state as job_health names it, the full lag
    url: str = ""
    column: int = 0
    row: int = 0
    x: int = 0
    y: int = 0


@dataclass
class Edge:
    source: str
    target: str
    kind: str = "flow"  # flow (data moves along it) or start_after (a connector waits)
    path: str = ""


@dataclass
class Layout:
    nodes: list[Node]
    edges: list[Edge]
    width: int = 0
    height: int = 0
    columns: list[str] = field(default_factory=list)


def layout(nodes: list[Node], edges: list[Edge]) -> Layout:
    """Place `nodes` (columns, rows, x, y) and draw `edges` (an SVG path each)."""
    by_id = {node.id: node for node in nodes}
    edges = [e for e in edges if e.source in by_id and e.target in by_id and e.source != e.target]
    flow = [e for e in edges if e.kind == "flow"]
    _columns(nodes, flow)
    columns: dict[int, list[Node]] = {}
    for node in sorted(nodes, key=lambda n: (n.kind != "connector", n.label)):
        columns.setdefault(node.column, []).append(node)
    _order(columns, flow, by_id)
    step_x, step_y = NODE_WIDTH + COLUMN_GAP, NODE_HEIGHT + ROW_GAP
    for number, column in columns.items():
        for row, node in enumerate(column):
            node.row = row
            node.x = LEFT + number * step_x
            node.y = MARGIN + row * step_y
    for edge in edges:
        edge.path = _path(by_id[edge.source], by_id[edge.target], edge.kind)
    tallest = max((len(c) for c in columns.values()), default=0)
    width = LEFT + MARGIN + (max(columns, default=-1) + 1) * step_x - COLUMN_GAP
    height = MARGIN * 2 + tallest * step_y - ROW_GAP
    return Layout(nodes=nodes, edges=edges, width=max(width, 0), height=max(height, 0))


def _columns(nodes: list[Node], flow: list[Edge]) -> None:
    """Longest path from a node without incoming edges; a cycle (none is allowed upstream:
    job_output refuses one) would be cut where the walk meets itself."""
    incoming: dict[str, list[str]] = {}
    for edge in flow:
        incoming.setdefault(edge.target, []).append(edge.source)
    depth: dict[str, int] = {}
    for node in nodes:
        stack, on_path = [(node.id, iter(incoming.get(node.id, ())))], {node.id}
        best: dict[str, int] = {}
        while stack:
            current, parents = stack[-1]
            parent = next(parents, None)
            if parent is None:
                stack.pop()
                on_path.discard(current)
                depth[current] = best.get(current, 0)
                if stack:
                    above = stack[-1][0]
                    best[above] = max(best.get(above, 0), depth[current] + 1)
            elif parent in depth:
                best[current] = max(best.get(current, 0), depth[parent] + 1)
            elif parent not in on_path:
                on_path.add(parent)
                stack.append((parent, iter(incoming.get(parent, ()))))
    for node in nodes:
        node.column = depth.get(node.id, 0)


def _order(columns: dict[int, list[Node]], flow: list[Edge], by_id: dict[str, Node]) -> None:
    before: dict[str, list[str]] = {}
    after: dict[str, list[str]] = {}
    for edge in flow:
        before.setdefault(edge.target, []).append(edge.source)
        after.setdefault(edge.source, []).append(edge.target)
    numbers = sorted(columns)
    for column in columns.values():
        for row, node in enumerate(column):
            node.row = row
    for sweep in range(SWEEPS):
        downward = sweep % 2 == 0
        for number in numbers[1:] if downward else reversed(numbers[:-1]):
            column = columns[number]
            rows = {n.id: i for i, n in enumerate(column)}
            neighbours = before if downward else after
            for node in column:
                rows[node.id] = _mean(
                    [by_id[o].row for o in neighbours.get(node.id, ())], rows[node.id]
                )
            column.sort(key=lambda n: rows[n.id])
            for row, node in enumerate(column):
                node.row = row


def _mean(values: list[int], default: float) -> float:
    return sum(values) / len(values) if values else default


def _path(source: Node, target: Node, kind: str) -> str:
    middle = NODE_HEIGHT // 2
    if kind == "start_after" or source.column == target.column:
        # a bow left of the column: from the waited-for connector to the one that waits
        x = source.x
        y1, y2 = source.y + middle, target.y + middle
        bow = x - LEFT + 4
        return f"M{x} {y1} C{bow} {y1} {bow} {y2} {x} {y2}"
    x1, y1 = source.x + NODE_WIDTH, source.y + middle
    x2, y2 = target.x, target.y + middle
    bend = (x2 - x1) / 2
    return f"M{x1} {y1} C{x1 + bend:.0f} {y1} {x2 - bend:.0f} {y2} {x2} {y2}"

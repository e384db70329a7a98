"""What PostgreSQL plans for a statement, for the tests that check how a statement reads."""

import json
from collections.abc import Iterator

from django.db import connection


def plan_of(sql: str, params, options: str = "") -> dict:
    """The top node of the statement's plan (EXPLAIN with `options`, as JSON)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({options}FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    return plan[0]["Plan"]


def plan_nodes(plan: dict) -> Iterator[dict]:
    """The node and every node below it."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)

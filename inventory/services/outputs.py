"""What a batch's output looks like to its sink: the publish fence's connection, and which
published outputs a batch replaces (docs/guarantees.md).

The fence itself is two SQL functions (tidemark_publish_begin/end, inventory/sql/schema/publish.sql) that the Spark
side calls with psycopg2 (workers/spark/fence.py), in the worker's process or a spark-submit
driver alike. It reaches the control-plane database through the environment variable named in
the batch spec, set here from the settings, so no DSN is ever written into a spec.
"""

import os

from django.db import connection

from inventory.models import Batch

FENCE_DSN_ENV = "TIDEMARK_FENCE_DSN"


def control_plane_dsn(*, dbname: str | None = None) -> str:
    """A libpq DSN of the database this process uses (the live connection's own parameters), or
    of another database `dbname` on the same server."""
    params = connection.get_connection_params()
    if dbname is not None:
        params = {**params, "database": dbname, "dbname": dbname}
    parts = []
    for name, key in (
        ("host", "host"),
        ("port", "port"),
        ("dbname", "database"),
        ("user", "user"),
        ("password", "password"),
    ):
        value = params.get(key) or (params.get("dbname") if name == "dbname" else None)
        if value not in (None, ""):
            parts.append(f"{name}='{_escape(str(value))}'")
    return " ".join(parts)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def fence_spec() -> dict:
    """The spec's "fence" entry; makes sure this process (and its children) can reach it."""
    if not os.environ.get(FENCE_DSN_ENV):
        os.environ[FENCE_DSN_ENV] = control_plane_dsn()
    return {"dsn_env": FENCE_DSN_ENV}


def live_outputs(*, job_id: int, lower: int, upper: int):
    """The job's batches whose output is in the sink and covers items in [lower, upper)."""
    return Batch.objects.filter(
        job_id=job_id,
        published_attempt__isnull=False,
        replaced_by__isnull=True,
        span__overlap=(lower, upper),
    ).order_by("span")

"""Python data sources (PySpark's Data Source API) whose partitions are read on executors.

The driver plans a batch (which offsets, which objects, the schema) and hands the plan to Spark as
one option; each partition of the plan is read by a Python worker of an executor, so the rows never
pass through the driver. A source's credentials are read on the driver from the environment
variables the spec names and travel to the executors inside the pickled data source class (as
`read_table.py` ships a DSN inside its task): never in an option, the Spark conf, a spec or a log.
One class is registered per source kind and credential set, under a name of its own, so batches
sharing a session never see each other's credentials.
"""

import json
import os
import socket
import sys
import threading

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource

_lock = threading.Lock()
_registered_names: dict[tuple, str] = {}


def load(spark: SparkSession, base: type[DataSource], secrets: dict, plan: dict) -> DataFrame:
    """A DataFrame over `plan`, read on executors by a subclass of `base` carrying `secrets`."""
    return (
        spark.read.format(_registered(spark, base, secrets)).option("plan", json.dumps(plan)).load()
    )


def _registered(spark: SparkSession, base: type[DataSource], secrets: dict) -> str:
    # registrations live in the JVM session: a new session (or a restarted one) registers again
    session = spark._jsparkSession.hashCode()
    key = (session, base.__module__, base.__qualname__, tuple(sorted(secrets.items())))
    with _lock:
        if key not in _registered_names:
            number = len(_registered_names) + 1
            name = f"tidemark_{base.name()}_{number}"
            spark.dataSource.register(source_class(base, secrets, name, number))
            _registered_names[key] = name
        return _registered_names[key]


def source_class(base: type[DataSource], secrets: dict, name: str, number: int) -> type:
    """The class registered as `name`: pickled by value, with its secrets; the base by reference,
    so a process that unpickles it (the driver's planner processes, each executor's reader)
    imports the base's module."""
    return type(
        f"{base.__name__}{number}",
        (base,),
        {"secrets": dict(secrets), "name": classmethod(lambda cls, _n=name: _n)},
    )


def plan_of(options: dict) -> dict:
    return json.loads(options["plan"])


def note_read(what: str, rows: int) -> None:
    """One line per partition in the executor's log: what was read, where, by which process."""
    sys.stderr.write(
        f"tidemark read: {what}: {rows} rows by pid {os.getpid()} on {socket.gethostname()}\n"
    )
    sys.stderr.flush()

"""What a batch may reach, checked again just before it runs (docs/design.md, invariant 11).

A config is checked when it is saved; this module checks what a batch's spec names once more in
the worker, right before the Spark side reads its inputs and writes its sink, against the
deployment's current settings: a config stored before a rule existed (or before an
administrator withdrew a variable, an endpoint or a root) fails its batch with the reason stored,
and reaches nothing. The rules themselves live in one module each: `secrets` (variables),
`endpoints` (hosts), `confinement` (paths).
"""

import os

from inventory.services import endpoints
from inventory.services.assets import location_inside
from inventory.services.confinement import path_confined
from inventory.services.errors import InvalidInput
from inventory.services.secrets import credential_value, env_names_check
from inventory.services.urls import url_parse
from inventory.sources import kafka as source_kafka
from inventory.sources.object_store.access import OBJECT_STORE_SCHEMES
from workers.spark.iceberg_files import local_path


def sink_confine(sink: dict | None, *, field: str = "sink") -> None:
    """A sink writes only under the allowed roots (files) and sends its DSN's credentials only to
    an allowed host (postgres). An unset variable passes here: the run reports it."""
    if not isinstance(sink, dict):
        return
    kind = sink.get("kind")
    if kind in ("files", "delta"):
        path_confined(sink.get("path"), f"{field}.path")
    elif kind == "postgres":
        name = sink.get("dsn_env")
        if name is not None:
            dsn = credential_value(name, field=f"{field}.dsn_env")
            if dsn:
                endpoints.dsn_check(dsn, field=f"{field}.dsn_env")
        elif isinstance(sink.get("dsn"), str):
            # no password in it (secrets.py), but libpq may add one from the worker's environment
            endpoints.dsn_check(sink["dsn"], field=f"{field}.dsn")


def _object_location(location: str, *, field: str) -> None:
    scheme = url_parse(location, field=field).scheme
    if not scheme:
        path_confined(location, field)
    elif scheme not in OBJECT_STORE_SCHEMES:
        raise InvalidInput(field, f"{scheme}: locations are not read")


def source_confine(source: dict | None, *, field: str = "connector.config") -> None:
    """A batch's source (a spec's "source") reaches only allowed hosts and paths."""
    if not isinstance(source, dict):
        return
    kind = source.get("kind")
    if kind == "object_store":
        if source.get("endpoint_url"):
            endpoints.url_check(source["endpoint_url"], field=f"{field}.endpoint_url")
        for obj in source.get("objects") or ():
            _object_location(obj.get("location", ""), field=f"{field}.path")
    elif kind == "table":
        dsn = credential_value(source.get("dsn_env"), field=f"{field}.dsn_env")
        if dsn:
            endpoints.dsn_check(dsn, field=f"{field}.dsn_env")
    elif kind == "kafka":
        source_kafka.confine(source)
    elif kind in ("delta", "hudi"):  # a table's files are read from under its (confined) directory
        path_confined(source.get("path"), f"{field}.path")
    elif kind == "iceberg":  # every file is read from under the table's (confined) location
        path_confined(local_path(source.get("location")), f"{field}.table")
    elif kind == "job_output":
        # an upstream commit's location comes from its result, which an external processor
        # reports through succeed/: read only where a sink may write
        outputs = [*(source.get("outputs") or ()), source.get("schema_from") or {}]
        for output in outputs:
            if output.get("location"):
                _object_location(output["location"], field=f"{field}.job")


def local_items(items: list, *, base: str | None, field: str = "connector.config.path") -> list:
    """A local files connector's items as the worker reads them: inside the connector's directory
    (a relative location is relative to it), or, without a directory (a meta table of paths),
    under the allowed roots."""
    confined = []
    for item in items:
        location = str(item)
        if base:
            location_inside(location, base=base, field=field)
            confined.append(os.path.join(base, location))
        else:
            _object_location(location, field=field)
            confined.append(location)
    return confined


def spec_confine(spec: dict) -> None:
    """Every name in a batch's spec checked against the deployment's current settings."""
    env_names_check(spec.get("source") or {}, "connector.config")
    env_names_check(spec.get("params") or {}, "job.params")
    env_names_check(spec.get("sink") or {}, "job.sink")
    source_confine(spec.get("source"))
    sink_confine(spec.get("sink"), field="job.sink")

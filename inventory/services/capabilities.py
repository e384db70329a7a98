"""What a batch may reach, checked again just before it runs (docs/design.md, invariant 11).

A config is checked when it is saved; this module checks what a batch's spec names once more in
the worker, right before the Spark side reads its inputs and writes its sink, against the
deployment's current settings: a config stored before a rule existed (or before an
administrator withdrew a variable, an endpoint or a root) fails its batch with the reason stored,
and reaches nothing. The rules themselves live in one module each: `secrets` (variables),
`endpoints` (hosts), `confinement` (paths).
"""

from inventory.services import endpoints
from inventory.services.confinement import path_confined
from inventory.services.errors import InvalidInput
from inventory.services.secrets import credential_value, env_names_check
from inventory.sources.registry import kind_named


def sink_confine(sink: dict | None, *, field: str = "sink") -> None:
    """A sink writes only under the allowed roots (files) and sends its DSN's credentials only to
    an allowed host (postgres). An unset variable passes here: the run reports it."""
    if not isinstance(sink, dict):
        return
    sink_kind = sink.get("kind")
    if sink_kind in ("files", "delta"):
        path_confined(sink.get("path"), f"{field}.path")
    elif sink_kind == "iceberg":
        iceberg_confine(sink, field=field)
    elif sink_kind == "postgres":
        name = sink.get("dsn_env")
        if name is not None:
            dsn = credential_value(name, field=f"{field}.dsn_env")
            if dsn:
                endpoints.dsn_check(dsn, field=f"{field}.dsn_env")
        elif isinstance(sink.get("dsn"), str):
            # no password in it (secrets.py), but libpq may add one from the worker's environment
            endpoints.dsn_check(sink["dsn"], field=f"{field}.dsn")


def iceberg_confine(config: dict, *, field: str) -> None:
    """An Iceberg catalog's SQLite file and warehouse lie under the allowed roots; its PostgreSQL
    DSN's variable is an allowed one and reaches an allowed host."""
    from workers.spark.iceberg_catalog import CatalogError, local_directory, sqlite_file

    try:
        if config.get("catalog_uri") is not None:
            path_confined(sqlite_file(config["catalog_uri"]), f"{field}.catalog_uri")
        path_confined(local_directory(config.get("warehouse"), "warehouse"), f"{field}.warehouse")
    except CatalogError as exc:
        raise InvalidInput(f"{field}.{exc.field}", str(exc)) from None
    name = config.get("catalog_dsn_env")
    if name is not None:
        dsn = credential_value(name, field=f"{field}.catalog_dsn_env")
        if dsn:
            endpoints.dsn_check(dsn, field=f"{field}.catalog_dsn_env")


def source_confine(source: dict | None, *, field: str = "connector.config") -> None:
    """A batch's source (a spec's "source") reaches only allowed hosts and paths: its kind's
    `confine` (inventory/sources/<kind>/kind.py)."""
    if not isinstance(source, dict):
        return
    kind = kind_named(source.get("kind"))
    if kind is not None:
        kind.confine(source, field=field)


def spec_confine(spec: dict) -> None:
    """Every name in a batch's spec checked against the deployment's current settings."""
    env_names_check(spec.get("source") or {}, "connector.config")
    env_names_check(spec.get("params") or {}, "job.params")
    env_names_check(spec.get("sink") or {}, "job.sink")
    source_confine(spec.get("source"))
    sink_confine(spec.get("sink"), field="job.sink")

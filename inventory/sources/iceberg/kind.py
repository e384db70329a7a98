"""The `iceberg` kind's object: an Iceberg table's snapshots, read by the worker's iceberg reader."""

from inventory.services.confinement import path_confined
from inventory.sources import iceberg
from inventory.sources.base import SourceKind
from inventory.sources.iceberg import retention
from workers.spark.iceberg_files import local_path

# besides `table`: the catalog that resolves it (another catalog's table of the same name is
# other data, its snapshot ids unrelated)
CATALOG_IDENTITY = ("catalog_uri", "catalog_dsn_env", "catalog_name")


class IcebergKind(SourceKind):
    name = "iceberg"

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        return iceberg.validate(config)

    def identity_changes(self, old: dict | None, new: dict | None) -> list[str]:
        changed = super().identity_changes(old, new)
        old, new = old or {}, new or {}
        return changed + [
            f"config.{key}" for key in CATALOG_IDENTITY if old.get(key) != new.get(key)
        ]

    def discover(self, connector) -> int:
        return iceberg.discover(connector)

    def after_discover(self, connector, restate) -> int:
        restate.iceberg_restate(connector)  # snapshots whose rows a later one replaced
        return 0

    def read_spec(self, connector, batch, *, source=None) -> dict:
        return iceberg.read_spec(connector=connector, batch=batch)

    def confine(self, source: dict, *, field: str) -> None:
        # every file is read from under the table's (confined) location
        path_confined(local_path(source.get("location")), f"{field}.table")

    def no_time_reason(self) -> str:
        return "its items are table snapshots, selected by id"

    def retention_probe(self):
        return retention.probe


KIND = IcebergKind()

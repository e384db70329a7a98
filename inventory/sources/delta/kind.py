"""The `delta` kind's object: a Delta Lake table's versions, read by the worker's delta reader."""

from inventory.services.confinement import path_confined
from inventory.sources import delta
from inventory.sources.base import SourceKind
from inventory.sources.delta import retention


class DeltaKind(SourceKind):
    name = "delta"

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        return delta.validate(config)

    def discover(self, connector) -> int:
        return delta.discover(connector)

    def after_discover(self, connector, restate) -> int:
        restate.delta_restate(connector)  # versions whose files a later version removed
        return 0

    def read_spec(self, connector, batch, *, source=None) -> dict:
        return delta.read_spec(connector=connector, batch=batch)

    def confine(self, source: dict, *, field: str) -> None:
        # a table's files are read from under its (confined) directory
        path_confined(source.get("path"), f"{field}.path")

    def no_time_reason(self) -> str:
        return "its items are table versions, selected by id"

    def retention_probe(self):
        return retention.probe


KIND = DeltaKind()

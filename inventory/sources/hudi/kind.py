"""The `hudi` kind's object: a Hudi table's instants, read by the worker's hudi reader."""

from inventory.services.confinement import path_confined
from inventory.sources import hudi
from inventory.sources.base import SourceKind
from inventory.sources.hudi import retention


class HudiKind(SourceKind):
    name = "hudi"

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        return hudi.validate(config)

    def discover(self, connector) -> int:
        return hudi.discover(connector)

    def after_discover(self, connector, restate) -> int:
        restate.hudi_restate(connector)  # instants whose rows a later instant changed
        return 0

    def read_spec(self, connector, batch, *, source=None) -> dict:
        return hudi.read_spec(connector=connector, batch=batch)

    def confine(self, source: dict, *, field: str) -> None:
        # a table's files are read from under its (confined) directory
        path_confined(source.get("path"), f"{field}.path")

    def no_time_reason(self) -> str:
        return "its items are table instants, selected by id"

    def retention_probe(self):
        return retention.probe


KIND = HudiKind()

"""The `meta_table` kind's object: a meta table in another PostgreSQL database, mirrored into
assets; the worker reads the listed files."""

from inventory.models import ConnectorKind
from inventory.services.errors import Conflict
from inventory.sources import meta_table
from inventory.sources.base import SourceKind, TimeBasis
from inventory.sources.config import check_read_config


class MetaTableKind(SourceKind):
    name = "meta_table"
    has_reader = False  # the listed files, read by format

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        config = meta_table.validate(config)
        if connector_kind == ConnectorKind.FILES:
            check_read_config(config)
        return config

    def discover(self, connector) -> int:
        return meta_table.discover(connector)

    def reads_files(self, connector) -> bool:
        return connector.kind == ConnectorKind.FILES

    def check_announce(self, connector) -> None:
        if connector.kind != ConnectorKind.FILES:
            super().check_announce(connector)
        raise Conflict(
            f"connector {connector.name} reads the external meta table "
            f"{connector.config['meta_table']!r}: add rows there instead"
        )

    def read_spec(self, connector, batch, *, source=None) -> dict:
        return meta_table.read_spec(connector=connector, batch=batch)

    def time_basis(self, connector) -> TimeBasis:
        return TimeBasis(
            "time",
            "registration time",
            "meta table rows registered between the two times (when Tidemark saw them)",
        )


KIND = MetaTableKind()

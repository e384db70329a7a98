"""The `object_store` kind's object: a `files` connector whose path is an object store URL."""

from inventory.services import endpoints
from inventory.sources import object_store
from inventory.sources.base import REGISTRATION_TIME, SourceKind, TimeBasis
from inventory.sources.config import check_read_config
from inventory.sources.locations import object_location_check


class ObjectStoreKind(SourceKind):
    name = "object_store"

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        config = object_store.validate(config)
        check_read_config(config)
        return config

    def discover(self, connector) -> int:
        return object_store.discover(connector)

    def after_discover(self, connector, restate) -> int:
        restate.changed_files_restate(connector)  # objects rewritten under their key
        return 0

    def snapshot_by_look(self, connector) -> bool:
        return bool((connector.config or {}).get("snapshot"))

    def walked_path(self, config: dict) -> str | None:
        return config.get("path")

    def reads_files(self, connector) -> bool:
        return True

    def check_announce(self, connector) -> None:
        """A producer may announce objects under the prefix."""

    def read_spec(self, connector, batch, *, source=None) -> dict:
        return object_store.read_spec(connector=connector, batch=batch)

    def confine(self, source: dict, *, field: str) -> None:
        if source.get("endpoint_url"):
            endpoints.url_check(source["endpoint_url"], field=f"{field}.endpoint_url")
        for obj in source.get("objects") or ():
            object_location_check(obj.get("location", ""), field=f"{field}.path")

    def time_basis(self, connector) -> TimeBasis:
        return REGISTRATION_TIME


KIND = ObjectStoreKind()

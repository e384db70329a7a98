"""The `files` kind's object: a local directory, scanned by `directory_discover`; the worker
reads the listed files (workers/spark/sources/files.py)."""

from inventory.services.errors import InvalidInput
from inventory.sources import files
from inventory.sources.base import REGISTRATION_TIME, SourceKind, TimeBasis
from inventory.sources.config import check_known_keys, check_read_config
from inventory.sources.files.known import changed_pending
from inventory.sources.identity import check_local_directory, source_table_check
from inventory.sources.items import quote_table
from inventory.sources.locations import local_items


class LocalFilesKind(SourceKind):
    name = "files"
    has_reader = False  # the listed files, read by format
    cursor_restarts = False  # a new path forgets its items (services/connectors.py)

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        if "table" in config:
            relation = quote_table(config["table"], field_name="config.table")
            source_table_check(relation, field="config.table")
        if not config.get("path"):
            raise InvalidInput(
                "config.path", "a files connector needs a directory path (or a meta_table)"
            )
        check_known_keys(config, files.DIRECTORY_KEYS, kind="files (local directory)")
        check_local_directory(config["path"], field="config.path")
        files.check_completion_config(config)
        check_read_config(config)
        return config

    def discovers(self, connector) -> bool:
        return bool((connector.config or {}).get("path"))

    def discover(self, connector) -> int:
        return files.directory_discover(connector=connector)

    def after_discover(self, connector, restate) -> int:
        # files rewritten after registration; whether any are flagged was asked by the look's
        # first statement (known.py: `changed_pending`), so a look with none sends nothing more
        if changed_pending(connector):
            restate.changed_files_restate(connector)
        return 0

    def snapshot_by_look(self, connector) -> bool:
        return bool((connector.config or {}).get("snapshot"))

    def walked_path(self, config: dict) -> str | None:
        return config.get("path")

    def reads_files(self, connector) -> bool:
        return True

    def check_announce(self, connector) -> None:
        """A producer may announce files of the directory."""

    def read_spec(self, connector, batch, *, source=None) -> dict:
        read = super().read_spec(connector, batch, source=source)
        # files the worker opens: inside the connector's directory, under the allowed roots
        return {"items": local_items(read["items"], base=(connector.config or {}).get("path"))}

    def time_basis(self, connector) -> TimeBasis:
        return REGISTRATION_TIME


KIND = LocalFilesKind()

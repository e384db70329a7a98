"""The `table` kind's object: a table of another PostgreSQL database read by a column, in
slices; the worker reads them with its table reader."""

from datetime import datetime

from inventory.services import endpoints
from inventory.services.errors import InvalidInput
from inventory.services.secrets import credential_value
from inventory.sources import table
from inventory.sources.base import SourceKind, TimeBasis, instant_parsed


class TableKind(SourceKind):
    name = "table"
    rereads_window = True
    syncs_offsets = True

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        return table.validate(config)

    def derived(self, config: dict) -> dict:
        return table.derived(config)

    def discover(self, connector) -> int:
        return table.discover(connector)

    def after_discover(self, connector, restate) -> int:
        """Late rows: those before the first registered slice, within the largest lookback of
        the connector's jobs, are in no slice and become slices of their own (new items); the
        slices within a job's lookback that gained rows are restated."""
        lookback = max(connector.jobs.values_list("lookback", flat=True), default=0)
        registered = table.early_rows_register(connector, lookback=lookback or 0)
        jobs = list(connector.jobs.filter(lookback__gt=0).select_related("watermark"))
        if jobs:
            late = table.late_slices(connector, lookback=max(job.lookback for job in jobs))
            restate.late_rows_restate(connector, late=late, jobs=jobs)
        return registered

    def read_spec(self, connector, batch, *, source=None) -> dict:
        return table.read_spec(connector=connector, batch=batch)

    def confine(self, source: dict, *, field: str) -> None:
        dsn = credential_value(source.get("dsn_env"), field=f"{field}.dsn_env")
        if dsn:
            endpoints.dsn_check(dsn, field=f"{field}.dsn_env")

    def time_basis(self, connector) -> TimeBasis:
        column = connector.config["column"]
        if connector.config.get("column_type") == "int":
            return TimeBasis(
                "value",
                f"value of column {column}",
                f"the slices holding rows whose {column} (an integer column) is in the range",
            )
        return TimeBasis(
            "time", f"column {column}", f"the slices holding rows whose {column} is in the range"
        )

    def time_value(self, connector, value, *, field: str):
        """A value of the column: an integer for an integer column (a form sends text), else a
        time as the column holds it: with an offset for timestamptz, without for a `timestamp`
        column (whose values have no zone to compare an offset with)."""
        column_type = connector.config["column_type"]
        if column_type == "int" and isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise InvalidInput(
                    field, f"must be an integer value for an integer column, got {value!r}"
                ) from None
        if column_type != "int" and isinstance(value, datetime):
            value = value.isoformat()
        if column_type == "timestamptz" and isinstance(value, str):
            return instant_parsed(value, field=field)
        return table.from_json(
            value.strip() if isinstance(value, str) else value, column_type, field=field
        )

    def ids_for_times(self, connector, first, last) -> tuple[int, int] | None:
        return table.time_range_to_ids(connector, first, last)

    def synced_offsets(self, connector, partition_column: str, offset_column: str) -> dict:
        return table.synced_offsets(connector, partition_column, offset_column)


KIND = TableKind()

"""What a source kind answers: the `SourceKind` base class, its hooks and their defaults.

Every kind plans on the same core: its items get ids in the order they become visible (assets
registered under the connector's row lock, or a job's commit sequence), and batches are
weight-bounded id ranges over them, so backfills, gap reports, corrections and the dashboard
work the same for all kinds. What differs from one kind to another is asked of its `SourceKind`
object (`inventory.sources.registry.kind_of(connector)`), never decided by comparing kind names
outside the kind's own folder (tests/repo/test_source_kind_guard.py):

- `validate(config, connector_kind=...)`: the config checked and normalized (InvalidInput
  naming `config.<key>`);
- `discovers(connector)` / `discover(connector)`: register the items that became visible since
  the last look, and `after_discover(connector)`: the restatement checks that follow a look;
- `item_source(connector)`: the SQL view of its items (default: the connector's assets);
- `read_spec(connector, batch, source=...)`: what the worker reads for one batch: `items` (labels
  of what it covers) and, for a kind with a reader of its own (`has_reader`), `source`
  (`{"kind": <name>, ...}`, never a secret, only environment-variable names);
- `confine(source, field=...)`: a spec's `source` checked again against the deployment's
  settings just before the worker reads it;
- `time_basis(connector)`, `time_value(...)`, `ids_for_times(...)`: what a backfill's time range
  means and the item ids it selects;
- `derived(config)`: the keys of a stored config `validate` filled in itself;
- `hand_over(connector, predecessors)`: what a connector that starts after others takes from
  them (a topic's first offsets from its history's table); `synced_offsets(...)` answers it;
- capabilities: `discovers_items`, `has_reader`, `rereads_window` (a job's `lookback`),
  `syncs_offsets`, `cursor_restarts` (a config change re-reads from the configured start),
  `reads_files(connector)` (the batch's items are files in a format), `snapshot_by_look`,
  `upstream_job(config)`, and the checks `check_watermark_type`, `check_announce`,
  `check_new_job`, `check_config_change`, `check_replay`, `check_job_delete`.
- `retention_probe()`: for a source that forgets data, the probe of its retention (the kind's
  `retention.py`) the retention forecast asks; None for one that keeps its data.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max, Min

from inventory.services.errors import InvalidInput
from inventory.services.instants import instant_checked
from inventory.sources.identity import identity_changes
from inventory.sources.items import ItemSource, assets_source, fetch_items

__all__ = ["ItemSource", "SourceKind", "TimeBasis", "instant_parsed"]


@dataclass(frozen=True)
class TimeBasis:
    """What a time range means for a connector's items."""

    by: str  # "time", or "value" for a table read by an integer column
    basis: str  # what is compared, e.g. "column updated_at", "registration time"
    explanation: str  # one sentence for the forms


REGISTRATION_TIME = TimeBasis(
    "time",
    "registration time",
    "files registered between the two times (a file's data times are unknown until it is read)",
)


def instant_parsed(value, *, field: str) -> datetime:
    """An ISO 8601 time with a UTC offset. A time without one is refused rather than guessed:
    the control plane's zone, the browser's and the data's may all differ."""
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(value.strip())
        except (AttributeError, TypeError, ValueError):
            raise InvalidInput(
                field, f"must be an ISO 8601 time with a UTC offset, got {value!r}"
            ) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise InvalidInput(
            field,
            f"{value!r} has no UTC offset; add one, e.g. {parsed.isoformat()}+00:00 or ...Z",
        )
    return instant_checked(parsed, field=field, given=value)


class SourceKind:
    """One behaviour of a connector's source; subclasses override what differs."""

    name: str = ""
    # its items are found by Tidemark (discover), not announced by their producer or a job
    discovers_items: bool = True
    # the worker reads its batches with `workers/spark/sources/<name>.py` (else: listed files)
    has_reader: bool = True
    # a job's `lookback` re-reads a window before each batch (a table read by a column)
    rereads_window: bool = False
    # its data can tell a following topic connector where the history stops (hand_over)
    syncs_offsets: bool = False
    # a config change re-reads from the configured start: the cursor and its items go
    cursor_restarts: bool = True

    def __repr__(self) -> str:
        return f"<source kind {self.name}>"

    # ---- config ---------------------------------------------------------------------------

    def validate(self, config: dict, *, connector_kind: str) -> dict:
        """The config checked and normalized; InvalidInput naming `config.<key>`."""
        return config

    def derived(self, config: dict) -> dict:
        """The keys of a stored config that `validate` filled in itself (a table's column type),
        so a pipelines file that leaves them out is not a change."""
        return {}

    def identity_changes(self, old: dict | None, new: dict | None) -> list[str]:
        """Config fields (`config.<key>`) whose change re-points the connector at other data."""
        return identity_changes(old, new)

    def upstream_job(self, config: dict) -> str:
        """The job whose commits are this connector's items ("" when none)."""
        return ""

    def walked_path(self, config: dict) -> str | None:
        """The directory or prefix whose listing gives the items (a sink may not write there)."""
        return None

    def items_are_assets(self, connector) -> bool:
        """Its items are the connector's registered assets (counted from their prefix sums)."""
        return True

    def reads_files(self, connector) -> bool:
        """The batch's items are files in a format (`config.format`, else their suffixes)."""
        return False

    def check_watermark_type(self, watermark_type: str) -> None:
        """Refuse a job watermark type the kind's items cannot hold (InvalidInput)."""

    def check_new_job(self, *, name: str, connector) -> None:
        """Refuse a new job `name` on `connector` (InvalidInput), e.g. one reading itself."""

    def check_config_change(self, *, connector, config: dict, reset: bool) -> None:
        """Refuse a new (already validated) config for an existing connector (InvalidInput)."""

    def check_replay(self, *, job, position: int) -> None:
        """Refuse moving `job`'s watermark back to `position` (InvalidInput)."""

    def check_job_delete(self, *, job) -> None:
        """Refuse deleting `job` while connectors of this kind read it (Conflict); asked of
        every kind (registry.job_delete_check)."""

    def check_announce(self, connector) -> None:
        """Whether a producer may announce items to this connector (raises when not)."""
        raise InvalidInput("kind", f"connector {connector.name} is {connector.kind}, not files")

    # ---- discovery ------------------------------------------------------------------------

    def discovers(self, connector) -> bool:
        """Whether Tidemark finds this connector's items itself."""
        return self.discovers_items

    def discover(self, connector) -> int:
        """Register what became visible since the last look; how many were new."""
        raise InvalidInput("kind", f"connector {connector.name} has nothing to discover")

    def snapshot_by_look(self, connector) -> bool:
        """A snapshot connector whose first look is its whole item set (closed afterwards)."""
        return False

    def after_discover(self, connector, restate) -> int:
        """The restatement checks that follow a look; how many more items they registered.
        `restate`: inventory.services.restatements, handed in by discovery (a kind does not
        import it: restating plans backfills, which ask this registry for item sources)."""
        return 0

    # ---- planning and reading -------------------------------------------------------------

    def item_source(self, connector) -> ItemSource:
        """The SQL view of the connector's items (ids, weights, labels)."""
        return assets_source(connector.pk)

    def read_spec(self, connector, batch, *, source: ItemSource | None = None) -> dict:
        """What the worker reads for `batch`: by default the locations of the items in its span,
        read as files (`source`: the item source when the caller built it already)."""
        source = source or self.item_source(connector)
        sql, params = source.select(lower=batch.span.lower, upper=batch.span.upper, limit=None)
        return {"items": [row[2] for row in fetch_items(source, sql, params)]}

    def confine(self, source: dict, *, field: str) -> None:
        """A spec's `source` checked against the deployment's current settings (InvalidInput)."""

    # ---- backfills by time ----------------------------------------------------------------

    def time_basis(self, connector) -> TimeBasis:
        """How a time range selects the connector's items; InvalidInput("time_start") when its
        items hold no time."""
        raise InvalidInput(
            "time_start",
            f"connector {connector.name} ({connector.kind}) cannot be backfilled by time: "
            f"{self.no_time_reason()}; give range_start/range_end (item ids)",
        )

    def no_time_reason(self) -> str:
        return "its items record no time"

    def time_value(self, connector, value, *, field: str):
        """One bound of a backfill's time range, as its items' times are compared with it."""
        return instant_parsed(value, field=field)

    def ids_for_times(self, connector, first, last) -> tuple[int, int] | None:
        """The first and last item id whose time is in [first, last] (None: no such item);
        by default the assets registered between the two times."""
        from inventory.models import Asset

        found = Asset.objects.filter(
            connector=connector, discovered_at__gte=first, discovered_at__lte=last
        ).aggregate(low=Min("id"), high=Max("id"))
        return None if found["low"] is None else (found["low"], found["high"])

    # ---- orchestration --------------------------------------------------------------------

    def hand_over(self, connector, predecessors: list) -> str:
        """Take what a connector starting after others needs from them (`predecessors`:
        [(connector, its kind)]); says what it set ("" when nothing)."""
        return ""

    def synced_offsets(self, connector, partition_column: str, offset_column: str) -> dict:
        """{partition: next offset} its data was synced to (kinds with `syncs_offsets`)."""
        raise InvalidInput("config.handover", f"connector {connector.name} holds no offsets")

    # ---- retention ------------------------------------------------------------------------

    def retention_probe(self) -> Callable[..., list] | None:
        """How its source's retention deletes what a job still needs, for a source that forgets
        data (a topic's retention, a table's vacuum or cleaner): a function
        `probe(*, connector, needed_id, rates, now)` returning the streams the forecast weighs
        (services/retention_forecast.py); None for a source that keeps its data."""
        return None

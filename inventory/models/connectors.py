"""Connectors, their events and their assets (the items a source registered, with prefix sums)."""

from django.db import models
from django.db.models import Q


class ConnectorKind(models.TextChoices):
    FILES = "files", "files"
    TABLE = "table", "table"
    KAFKA = "kafka", "kafka"
    JOB_OUTPUT = "job_output", "job output"
    DELTA = "delta", "delta"
    HUDI = "hudi", "hudi"
    ICEBERG = "iceberg", "iceberg"


class ConnectorState(models.TextChoices):
    ACTIVE = "active", "active"
    PAUSED = "paused", "paused"
    WAITING = "waiting", "waiting"
    COMPLETED = "completed", "completed"


def weight_unit(kind: str, config: dict | None) -> str:
    """What one unit of a connector's item weight is, so it can be shown as such: "bytes" for
    files (local or object store), Delta versions, Hudi instants, Iceberg snapshots and job outputs (docs/sources/), "rows" for a
    table read in slices, "messages" for Kafka, "" for a meta table, whose weight column means
    whatever its writer chose. The dashboard, the admin and the API all take it from here."""
    config = config or {}
    if "meta_table" in config:
        return ""
    if kind in (
        ConnectorKind.FILES,
        ConnectorKind.DELTA,
        ConnectorKind.HUDI,
        ConnectorKind.ICEBERG,
        ConnectorKind.JOB_OUTPUT,
    ):
        return "bytes"
    if kind == ConnectorKind.TABLE:
        # without dsn_env a table in Tidemark's own database is read as a meta table
        return "rows" if "dsn_env" in config else ""
    if kind == ConnectorKind.KAFKA:
        return "messages"
    return ""


class Connector(models.Model):
    """A source of data. Secrets in `config` are referenced by environment-variable name only."""

    name = models.SlugField(max_length=100)
    kind = models.CharField(max_length=20, choices=ConnectorKind.choices)
    labels = models.JSONField(default=list, blank=True)
    config = models.JSONField(default=dict, blank=True)
    state = models.CharField(
        max_length=20, choices=ConnectorState.choices, default=ConnectorState.ACTIVE
    )
    start_after = models.CharField(max_length=100, blank=True, default="")
    # Where discovery got to in the source (kind-specific: the last registered column value of a
    # table, the next offset per Kafka partition, the last listed key of a prefix, the snapshot
    # bound), written under the connector's row lock with the items it registered.
    cursor = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="connector_name_unique"),
            models.CheckConstraint(
                condition=Q(kind__in=ConnectorKind.values), name="connector_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(state__in=ConnectorState.values), name="connector_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def weight_unit(self) -> str:
        return weight_unit(self.kind, self.config)


class ConnectorEvent(models.Model):
    """A connector's state change (orchestration, pause/resume, snapshot completed), with why."""

    connector = models.ForeignKey(Connector, on_delete=models.CASCADE, related_name="events")
    old_state = models.CharField(max_length=20, choices=ConnectorState.choices)
    new_state = models.CharField(max_length=20, choices=ConnectorState.choices)
    actor = models.CharField(max_length=150, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["connector", "-id"], name="connector_event_history_idx")]

    def __str__(self) -> str:
        return f"{self.connector.name}: {self.old_state} -> {self.new_state}"


class Asset(models.Model):
    """One processable unit of a `files` connector. Ids follow visibility order (invariant 5)."""

    # no index of its own: asset_connector_id_idx (connector, id) serves every lookup by connector,
    # and a lone connector index lured the planner into reading a connector's every asset for
    # "assets of C after id P" (the overview's lag)
    connector = models.ForeignKey(
        Connector, on_delete=models.CASCADE, related_name="assets", db_index=False
    )
    location = models.TextField()
    weight = models.BigIntegerField()
    discovered_at = models.DateTimeField(auto_now_add=True)
    extra = models.JSONField(default=dict, blank=True)
    # The running count and weight of the connector's assets up to and including this one, in id
    # order: a job's lag is (cum at the connector's last asset) - (cum at the last asset before
    # its watermark), two index lookups whatever the backlog. Written by the registering INSERT
    # under the connector's row lock (sql/schema/registration.sql); any other insert, a delete,
    # or a weight change is put right by triggers (sql/schema/prefix_sums.sql).
    cum_count = models.BigIntegerField(null=True, editable=False)
    cum_weight = models.DecimalField(max_digits=38, decimal_places=0, null=True, editable=False)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["connector", "location"], name="asset_connector_location_unique"
            ),
            models.CheckConstraint(condition=Q(weight__gte=0), name="asset_weight_non_negative"),
        ]
        indexes = [
            # batch planning: "items of connector C with id >= x, in id order"
            models.Index(fields=["connector", "id"], name="asset_connector_id_idx"),
            # planning's searches of the prefix sums (sql/schema/prefix_sums.sql:
            # tidemark_asset_batch): the last asset within a weight budget, within an item cap
            models.Index(
                fields=["connector", "cum_weight", "id"], name="asset_connector_cum_weight_idx"
            ),
            models.Index(fields=["connector", "cum_count"], name="asset_connector_cum_count_idx"),
            # discovery's every look: the files flagged as changed after registration and not yet
            # restated (restatements.changed_files_restate). Partial, so it holds only those rows
            # (none, most of the time) and the look reads nothing of the connector's other assets
            models.Index(
                fields=["connector", "id"],
                condition=Q(extra__has_key="changed_after_registration")
                & ~Q(extra__has_key="restated"),
                name="asset_changed_unrestated_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.location

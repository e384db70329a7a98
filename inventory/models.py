"""The inventory: connectors, assets, jobs, batches, watermarks, backfills.

The database holds the invariants (DESIGN.md): named unique and check constraints, and an exclusion
constraint so that no two live batches of one job's lane cover the same item id.
"""

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import BigIntegerRangeField, RangeOperators
from django.db import models
from django.db.models import F, Func, Q, Value
from django.db.models.functions import Coalesce


class ConnectorKind(models.TextChoices):
    FILES = "files", "files"
    TABLE = "table", "table"
    KAFKA = "kafka", "kafka"
    JOB_OUTPUT = "job_output", "job output"
    DELTA = "delta", "delta"


class ConnectorState(models.TextChoices):
    ACTIVE = "active", "active"
    PAUSED = "paused", "paused"
    WAITING = "waiting", "waiting"
    COMPLETED = "completed", "completed"


def weight_unit(kind: str, config: dict | None) -> str:
    """What one unit of a connector's item weight is, so it can be shown as such: "bytes" for
    files (local or object store), Delta versions and job outputs (docs/sources/), "rows" for a
    table read in slices, "messages" for Kafka, "" for a meta table, whose weight column means
    whatever its writer chose. The dashboard, the admin and the API all take it from here."""
    config = config or {}
    if "meta_table" in config:
        return ""
    if kind in (ConnectorKind.FILES, ConnectorKind.DELTA, ConnectorKind.JOB_OUTPUT):
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
        return f"{self.connector_id}: {self.old_state} -> {self.new_state}"


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
    # under the connector's row lock (queries.sql: assets_register); any other insert, a delete,
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
        ]

    def __str__(self) -> str:
        return self.location


class WatermarkType(models.TextChoices):
    INT = "int", "int"
    DATETIME = "datetime", "datetime"
    KEY_VALUE = "key_value", "key/value"
    FILE_SET = "file_set", "file set"


class RestatementPolicy(models.TextChoices):
    AUTOMATIC = "automatic", "automatic (rebuild at once)"
    PROPOSED = "proposed", "proposed (an operator applies it)"


class Job(models.Model):
    """What to do with a connector's data, and how much of it at a time."""

    name = models.SlugField(max_length=100)
    connector = models.ForeignKey(Connector, on_delete=models.PROTECT, related_name="jobs")
    processor = models.CharField(max_length=100, default="passthrough")
    params = models.JSONField(default=dict, blank=True)
    sink = models.JSONField(default=dict, blank=True)
    watermark_type = models.CharField(
        max_length=20, choices=WatermarkType.choices, default=WatermarkType.INT
    )
    batch_weight = models.BigIntegerField(help_text="weight budget of one batch")
    max_items = models.PositiveIntegerField(default=1000, help_text="item cap of one batch")
    max_attempts = models.PositiveSmallIntegerField(default=3)
    retry_backoff_seconds = models.PositiveIntegerField(default=30)
    lease_seconds = models.PositiveIntegerField(default=120)
    schedule_seconds = models.PositiveIntegerField(null=True, blank=True)
    schedule_cron = models.CharField(max_length=100, blank=True, default="")
    max_concurrency = models.PositiveSmallIntegerField(default=1)
    executor = models.CharField(max_length=20, default="warm")
    start_position = models.BigIntegerField(default=0, help_text="first item id this job considers")
    lookback = models.BigIntegerField(
        default=0,
        help_text="late data: every batch of a table source also re-reads this much before its "
        "range (seconds for a timestamp column, values for an integer column); the sink's upsert "
        "removes the duplicates",
    )
    restatements = models.CharField(
        max_length=20,
        choices=RestatementPolicy.choices,
        default=RestatementPolicy.AUTOMATIC,
        help_text="when input this job already committed changes: rebuild the affected outputs at "
        "once (automatic), or record a proposed replay for an operator to apply (proposed)",
    )
    paused = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="job_name_unique"),
            models.CheckConstraint(
                condition=Q(restatements__in=RestatementPolicy.values),
                name="job_restatements_valid",
            ),
            models.CheckConstraint(
                condition=Q(batch_weight__gt=0), name="job_batch_weight_positive"
            ),
            models.CheckConstraint(condition=Q(max_items__gt=0), name="job_max_items_positive"),
            models.CheckConstraint(
                condition=Q(max_attempts__gt=0), name="job_max_attempts_positive"
            ),
            models.CheckConstraint(
                condition=Q(watermark_type__in=WatermarkType.values),
                name="job_watermark_type_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class BatchKind(models.TextChoices):
    INCREMENTAL = "incremental", "incremental"
    BACKFILL = "backfill", "backfill"


class BatchStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    DEAD = "dead", "dead"
    SKIPPED = "skipped", "skipped"
    CANCELLED = "cancelled", "cancelled"
    SUPERSEDED = "superseded", "superseded (replayed)"


# Batches that hold their range: nobody else may plan over it.
HOLDING_STATUSES = (
    BatchStatus.QUEUED,
    BatchStatus.RUNNING,
    BatchStatus.SUCCEEDED,
    BatchStatus.FAILED,
    BatchStatus.DEAD,
    BatchStatus.SKIPPED,
)
# Batches the watermark may move over.
COMMITTED_STATUSES = (BatchStatus.SUCCEEDED, BatchStatus.SKIPPED)
# Batches still to run: an open backfill batch holds the incremental planner back.
OPEN_STATUSES = (BatchStatus.QUEUED, BatchStatus.RUNNING, BatchStatus.FAILED)
# Committed batches whose published output stays in the sink until a later batch replaces it.
OUTPUT_STATUSES = (*COMMITTED_STATUSES, BatchStatus.SUPERSEDED)
# A backfill is completed once every one of its batches is in one of these.
BACKFILL_DONE_STATUSES = (BatchStatus.SUCCEEDED, BatchStatus.SKIPPED, BatchStatus.CANCELLED)
# The SQL functions use the same lists (inventory/sql/schema/statuses.sql; tests/test_sql_schema.py).


class BackfillStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    PAUSED = "paused", "paused"
    COMPLETED = "completed", "completed"
    CANCELLED = "cancelled", "cancelled"


class Backfill(models.Model):
    """A request to (re)process the closed id range [range_start, range_end] of a job."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="backfills")
    range_start = models.BigIntegerField()
    range_end = models.BigIntegerField()
    batch_weight = models.BigIntegerField()
    max_items = models.PositiveIntegerField()
    max_concurrency = models.PositiveSmallIntegerField(default=1)
    priority = models.SmallIntegerField(
        default=0, help_text="above 0 runs before incremental work, below 0 after it"
    )
    status = models.CharField(
        max_length=20, choices=BackfillStatus.choices, default=BackfillStatus.PENDING
    )
    reason = models.TextField(blank=True, default="")
    # shown, never planned by: the ids above are what the backfill covers
    requested = models.JSONField(
        null=True,
        blank=True,
        help_text="the time (or column value) range the ids were resolved from: "
        '{"by", "basis", "start", "end"}; null when given by ids',
    )
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(range_end__gte=F("range_start")), name="backfill_range_ordered"
            ),
            models.CheckConstraint(
                condition=Q(batch_weight__gt=0), name="backfill_batch_weight_positive"
            ),
            models.CheckConstraint(
                condition=Q(status__in=BackfillStatus.values), name="backfill_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"backfill {self.pk} of {self.job_id} [{self.range_start}, {self.range_end}]"


class RestatementCause(models.TextChoices):
    LATE_ROWS = "late_rows", "late rows in a table slice"
    CHANGED_FILES = "changed_files", "files changed after registration"
    CHANGED_OBJECTS = "changed_objects", "objects whose ETag changed"
    UPSTREAM = "upstream", "upstream commits replaced"
    DELTA_VERSIONS = "delta_versions", "Delta versions whose files a later version removed"


class RestatementStatus(models.TextChoices):
    PENDING = "pending", "pending (a batch over the items is running)"
    PROPOSED = "proposed", "proposed (waits for an operator)"
    APPLIED = "applied", "applied (its backfill rebuilds the outputs)"
    DISMISSED = "dismissed", "dismissed"


class Restatement(models.Model):
    """Input a job already committed changed over [range_start, range_end] (item ids): what
    changed, why, and what was done about it. Written by services/restatements.py only."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="restatement_records")
    cause = models.CharField(max_length=20, choices=RestatementCause.choices)
    status = models.CharField(max_length=20, choices=RestatementStatus.choices)
    range_start = models.BigIntegerField()
    range_end = models.BigIntegerField()
    priority = models.SmallIntegerField(default=0)
    reason = models.TextField()
    detail = models.JSONField(
        default=dict, blank=True, help_text="the source of the restatement (items, commits)"
    )
    preview = models.JSONField(
        null=True, blank=True, help_text="the backfill plan proposed, with its fingerprint"
    )
    backfill = models.ForeignKey(
        "Backfill",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="restatements",
    )
    decided_by = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    dismiss_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(cause__in=RestatementCause.values), name="restatement_cause_valid"
            ),
            models.CheckConstraint(
                condition=Q(status__in=RestatementStatus.values), name="restatement_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(range_end__gte=F("range_start")), name="restatement_range_ordered"
            ),
            models.CheckConstraint(
                condition=~Q(status=RestatementStatus.DISMISSED) | ~Q(dismiss_reason=""),
                name="restatement_dismissed_has_reason",
            ),
        ]
        indexes = [
            # the job page, the API's list and the gap report: "restatements of job J, newest first"
            models.Index(fields=["job", "-id"], name="restatement_job_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"restatement {self.pk} of {self.job_id} [{self.range_start}, {self.range_end}]"

    @property
    def state(self) -> str:
        """pending, proposed, dismissed, or for an applied one its backfill's progress:
        rebuilding, done, cancelled."""
        if self.status != RestatementStatus.APPLIED:
            return self.status
        backfill = self.backfill
        if backfill is None:
            return "applied"
        if backfill.status == BackfillStatus.COMPLETED:
            return "done"
        if backfill.status == BackfillStatus.CANCELLED:
            return "cancelled"
        return "rebuilding"


def _point_range(expression):
    """int8range(x, x, '[]'): lets a GiST exclusion constraint compare plain ints without btree_gist."""
    return Func(expression, expression, Value("[]"), function="int8range")


class Batch(models.Model):
    """One unit of work of one job: the half-open id range `span`, from where the job's previous
    batch ended (or its start position) to its last item + 1; ids may skip inside it."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="batches")
    backfill = models.ForeignKey(
        Backfill, on_delete=models.CASCADE, null=True, blank=True, related_name="batches"
    )
    kind = models.CharField(max_length=20, choices=BatchKind.choices)
    status = models.CharField(max_length=20, choices=BatchStatus.choices)
    span = BigIntegerRangeField()
    item_count = models.PositiveIntegerField()
    weight = models.BigIntegerField()
    attempt = models.PositiveSmallIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField()
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, default="")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)
    watermark_value = models.JSONField(
        null=True, blank=True, help_text="source-derived watermark reported on success"
    )
    error = models.JSONField(default=dict, blank=True)
    skip_reason = models.TextField(blank=True, default="")
    config_snapshot = models.JSONField(default=dict, blank=True)
    # The sink's side of the batch (invariant 7): which attempt's output a reader of the sink sees,
    # and which later batch removed that output when it published its own (a replay, a backfill,
    # a retry of a refilled hole). Set only under the publish fence (tidemark_publish_begin/end).
    published_attempt = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="the attempt whose output is in the sink"
    )
    # The order in which this job's batches committed (1, 2, ...), assigned by tidemark_succeed
    # under the job's watermark row lock: a downstream `job_output` connector reads the job's
    # commits in this order (invariant 5: visible order = id order).
    commit_seq = models.BigIntegerField(null=True, blank=True)
    replaced_by = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="replaced",
        help_text="the batch whose output replaced this one's in the sink",
    )

    class Meta:
        verbose_name_plural = "batches"
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=BatchStatus.values), name="batch_status_valid"
            ),
            models.CheckConstraint(condition=Q(kind__in=BatchKind.values), name="batch_kind_valid"),
            models.CheckConstraint(
                condition=Q(kind=BatchKind.BACKFILL, backfill__isnull=False)
                | Q(kind=BatchKind.INCREMENTAL, backfill__isnull=True),
                name="batch_backfill_matches_kind",
            ),
            models.CheckConstraint(condition=Q(span__isempty=False), name="batch_span_not_empty"),
            # also the index of a downstream job's planning: "commits of job J after sequence S"
            models.UniqueConstraint(
                fields=["job", "commit_seq"],
                name="batch_commit_seq_unique",
                condition=Q(commit_seq__isnull=False),
            ),
            models.CheckConstraint(condition=Q(weight__gte=0), name="batch_weight_non_negative"),
            models.CheckConstraint(
                condition=~Q(status=BatchStatus.RUNNING) | Q(lease_expires_at__isnull=False),
                name="batch_running_has_lease",
            ),
            models.CheckConstraint(
                condition=~Q(status=BatchStatus.SKIPPED) | ~Q(skip_reason=""),
                name="batch_skipped_has_reason",
            ),
            # Invariant 2 in the database: within one job's lane (incremental = backfill 0, or one
            # backfill), no two batches that hold their range overlap. Single-column range
            # expressions only, so it needs no btree_gist and holds on pgserver's PostgreSQL too.
            ExclusionConstraint(
                name="batch_no_overlap_per_job_lane",
                expressions=[
                    (_point_range(F("job_id")), RangeOperators.OVERLAPS),
                    (_point_range(Coalesce(F("backfill_id"), Value(0))), RangeOperators.OVERLAPS),
                    (F("span"), RangeOperators.OVERLAPS),
                ],
                condition=Q(status__in=HOLDING_STATUSES),
            ),
        ]
        indexes = [
            models.Index(fields=["job", "status"], name="batch_job_status_idx"),
            # planning and watermark advance: "incremental batches of job J ending after position P"
            models.Index(
                F("job"),
                Func(F("span"), function="upper", output_field=models.BigIntegerField()),
                name="batch_incremental_upper_idx",
                condition=Q(backfill__isnull=True),
            ),
            # the reaper: "running batches whose lease expired"
            models.Index(
                fields=["lease_expires_at"],
                name="batch_running_lease_idx",
                condition=Q(status=BatchStatus.RUNNING),
            ),
            # tidemark_publish_begin and backfill planning: "outputs of job J still in the sink"
            models.Index(
                fields=["job"],
                name="batch_live_output_idx",
                condition=Q(published_attempt__isnull=False, replaced_by__isnull=True),
            ),
            # the overview and /metrics: "open batches by job and status" (selectors_health.job_rows,
            # job_blockers); small, since most batches are committed
            models.Index(
                fields=["status", "job"],
                name="batch_open_status_idx",
                condition=Q(
                    status__in=[
                        BatchStatus.QUEUED,
                        BatchStatus.RUNNING,
                        BatchStatus.FAILED,
                        BatchStatus.DEAD,
                    ]
                ),
            ),
            # the blocker of a job's watermark ("incremental batch of job J starting at P"), the
            # coverage strip and the gap report ("batches of job J starting before hi")
            models.Index(
                F("job"),
                Func(F("span"), function="lower", output_field=models.BigIntegerField()),
                name="batch_job_lower_idx",
            ),
            # the overview's last batch per job and the job page's batches filtered by status
            models.Index(fields=["job", "-id"], name="batch_job_recent_idx"),
            # "batches finished since T" (the last-day sparklines and ETAs read JobHourlyRates
            # now)
            models.Index(
                fields=["finished_at"],
                name="batch_finished_idx",
                condition=Q(finished_at__isnull=False),
            ),
            # "succeeded batches of job J, newest first" (selectors.backfill_duration_estimate;
            # the last-day rates read JobHourlyRates now)
            models.Index(
                fields=["job", "finished_at"],
                name="batch_job_succeeded_idx",
                condition=Q(status=BatchStatus.SUCCEEDED),
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.pk} of job {self.job_id} {self.span} ({self.status})"

    @property
    def first_item(self) -> int:
        return self.span.lower

    @property
    def last_item(self) -> int:
        return self.span.upper - 1


class BatchAttempt(models.Model):
    """One start of a batch, kept for the batch's history."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    worker = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, blank=True, default="")
    error = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["batch", "number"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "number"], name="attempt_batch_number_unique"),
        ]
        indexes = [
            # /metrics' attempt counters: "attempts finished since the rollup's boundary"
            # (selectors_health.attempt_counts)
            models.Index(
                fields=["finished_at"],
                name="attempt_finished_idx",
                condition=Q(finished_at__isnull=False),
            ),
            # "attempts that did not succeed, finished since T": read by the last-day rates
            # until they read JobHourlyRates; no reader left (a candidate to drop)
            models.Index(
                fields=["finished_at"],
                name="attempt_failed_finished_idx",
                condition=~Q(outcome__in=["", "succeeded"]),
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of batch {self.batch_id}"


class AttemptRollup(models.Model):
    """Attempt counts per job and outcome: "" counts the attempts started, with an id below
    `MaintenanceRun("attempt-rollup").outcome["below_id"]`; an outcome counts the attempts that
    finished with it before `outcome["finished_before"]` (a finished attempt no longer changes).
    /metrics adds the few attempts at or after these boundaries instead of counting every attempt
    on each scrape, so the sum is exact (services/metrics_rollup.py)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    outcome = models.CharField(max_length=20, blank=True, default="")
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "outcome"], name="attempt_rollup_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.outcome or 'started'}: {self.count}"


class JobHourlyRates(models.Model):
    """Attempts finished per job and clock hour (UTC): succeeded and failed, and the items and
    weight of the succeeded ones. Kept by a trigger on the attempt that finishes, in the commit or
    failure transaction (sql/schema/rates.sql), so the dashboard's last-day rates read at most 24
    rows per job instead of counting batches; a job's rows older than two days go when it starts
    a new hour."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    succeeded = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    items = models.BigIntegerField(default=0)
    weight = models.DecimalField(max_digits=38, decimal_places=0, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "hour"], name="job_hourly_rates_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.hour:%Y-%m-%d %H}h: {self.succeeded} ok, {self.failed} failed"


class BackfillThrottle(models.Model):
    """A weight-per-minute budget that all running backfills draw from: global (no connector) or
    per connector. Backfill pacing dispatches a batch only while the weight of backfill batches
    started in the last minute leaves room for it."""

    connector = models.OneToOneField(
        Connector, on_delete=models.CASCADE, null=True, blank=True, related_name="throttle"
    )
    weight_per_minute = models.BigIntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["connector"], name="backfill_throttle_one_per_scope", nulls_distinct=False
            ),
            models.CheckConstraint(
                condition=Q(weight_per_minute__gt=0), name="backfill_throttle_positive"
            ),
        ]

    def __str__(self) -> str:
        scope = self.connector.name if self.connector_id else "all connectors"
        return f"{self.weight_per_minute}/min for {scope}"


class Watermark(models.Model):
    """How far a job has committed: `position` is the end of the contiguous committed id prefix,
    `value` the typed high-water mark (int, datetime ISO string, key -> int map, or file list)."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="watermark")
    type = models.CharField(max_length=20, choices=WatermarkType.choices)
    position = models.BigIntegerField()
    value = models.JSONField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job"], name="watermark_one_per_job"),
            models.CheckConstraint(
                condition=Q(type__in=WatermarkType.values), name="watermark_type_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"watermark of job {self.job_id}: {self.value}"


class WatermarkSource(models.TextChoices):
    BATCH = "batch", "batch"
    ADMIN = "admin", "admin"
    API = "api", "api"
    SYSTEM = "system", "system"


class WatermarkEvent(models.Model):
    """Every change of a watermark, with who and why."""

    watermark = models.ForeignKey(Watermark, on_delete=models.CASCADE, related_name="events")
    old_position = models.BigIntegerField()
    new_position = models.BigIntegerField()
    old_value = models.JSONField(null=True, blank=True)
    new_value = models.JSONField(null=True, blank=True)
    source = models.CharField(max_length=20, choices=WatermarkSource.choices)
    batch = models.ForeignKey(Batch, on_delete=models.SET_NULL, null=True, blank=True)
    actor = models.CharField(max_length=150, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    is_replay = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["watermark", "-id"], name="wm_event_history_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.old_value} -> {self.new_value}"


class MaintenanceRun(models.Model):
    """When a periodic step (the lease reaper, ...) last ran, by the database's clock, so the
    dashboard and /metrics can show a step that is overdue (no beat, no worker)."""

    name = models.CharField(primary_key=True, max_length=100)
    last_run_at = models.DateTimeField()
    outcome = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.last_run_at}"

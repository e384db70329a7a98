"""API shapes. Input serializers only validate; views pass the validated data to a service.

Configs are shown as stored: secrets are never stored (inventory.services.secrets refuses them;
`*_env` keys hold an environment variable's *name*). As a second line of defence, any key that
looks like a secret and any credential inside a string is masked on the way out, at any depth,
in configs, results and errors alike.
"""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory.models import (
    Asset,
    Backfill,
    Batch,
    BatchAttempt,
    Connector,
    ConnectorEvent,
    ConnectorKind,
    Job,
    Watermark,
    WatermarkEvent,
)
from inventory.services.jobs import FIXED_JOB_FIELDS, JOB_SETTINGS
from inventory.services.secrets import mask
from inventory.sources import registry as source_kinds

BIGINT = 2**63 - 1
INT = 2**31 - 1
SMALLINT = 2**15 - 1


def public_config(value):
    """A copy of a config (or an error, a result) with every secret-looking key and every
    credential inside a string masked, at any depth (inventory.services.secrets)."""
    return mask(value)


class PublicJSONField(serializers.JSONField):
    """A JSON object shown through public_config."""

    def to_representation(self, value):
        return super().to_representation(public_config(value))


class AnyJSONField(serializers.JSONField):
    """Any JSON value (schema: no type constraint)."""


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField(
        required=False, help_text="409 only: `conflict`, or `staleattempt` when a lease was lost"
    )


# ---- connectors --------------------------------------------------------------------------------


WEIGHT_UNIT_HELP = (
    "what one unit of weight is: `bytes` (files, object stores, Delta, job outputs), `rows` (a "
    "table read in slices), `messages` (Kafka), or empty (a meta table's own weight column)"
)


class ConnectorSerializer(serializers.ModelSerializer):
    config = PublicJSONField(
        help_text="the connector's config; `*_env` values are environment-variable names"
    )
    jobs = serializers.SlugRelatedField(many=True, read_only=True, slug_field="name")
    cursor = AnyJSONField(
        read_only=True,
        help_text="where discovery got to in the source (a table's next column value, the next "
        "offset per Kafka partition, the last listed key, the snapshot bound)",
    )
    weight_unit = serializers.CharField(read_only=True, help_text=WEIGHT_UNIT_HELP)
    config_derived = serializers.SerializerMethodField(
        help_text="the keys of `config` the server filled in itself when it was saved (a table's "
        "column_type, a defaulted watermark_column): `tidemark plan` does not count them as changes "
        "when a pipelines file leaves them out"
    )

    class Meta:
        model = Connector
        fields = [
            "name",
            "kind",
            "labels",
            "config",
            "state",
            "start_after",
            "cursor",
            "jobs",
            "weight_unit",
            "config_derived",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.DictField())
    def get_config_derived(self, connector: Connector) -> dict:
        return source_kinds.config_derived(connector)


class ConnectorCreateSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=100)
    kind = serializers.ChoiceField(choices=ConnectorKind.choices)
    config = serializers.DictField(required=False, default=dict)
    labels = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, default=list
    )
    start_after = serializers.CharField(
        max_length=100, required=False, allow_blank=True, default=""
    )

    def validate_name(self, value):
        if Connector.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"a connector named {value!r} already exists")
        return value


class ConnectorUpdateSerializer(serializers.Serializer):
    """Name and kind are fixed; config, labels and start_after may change (the source identity in
    the config only without jobs: see reset/)."""

    config = serializers.DictField(required=False)
    labels = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    start_after = serializers.CharField(max_length=100, required=False, allow_blank=True)


class ConnectorResetSerializer(serializers.Serializer):
    config = serializers.DictField(
        help_text="the new config, source identity (path, meta_table, table, topic) included"
    )
    reason = serializers.CharField(max_length=2000, help_text="recorded on each job's watermark")


# ---- jobs and watermarks -----------------------------------------------------------------------


class WatermarkSerializer(serializers.ModelSerializer):
    value = AnyJSONField(allow_null=True, help_text="typed high-water mark (null: nothing yet)")

    class Meta:
        model = Watermark
        fields = ["type", "position", "value", "updated_at"]
        read_only_fields = fields


class LagSerializer(serializers.Serializer):
    items = serializers.IntegerField(help_text="items at or after the watermark")
    weight = serializers.IntegerField(help_text="their summed weight")


class BlockerSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    range_start = serializers.IntegerField(source="first_item")
    range_end = serializers.IntegerField(source="last_item")


class WatermarkStateSerializer(WatermarkSerializer):
    job = serializers.CharField(source="job.name")
    lag = LagSerializer(allow_null=True, help_text="null when the items cannot be read now")
    blocked_by = BlockerSerializer(
        allow_null=True, help_text="the uncommitted batch the watermark waits for"
    )

    class Meta(WatermarkSerializer.Meta):
        fields = ["job", *WatermarkSerializer.Meta.fields, "lag", "blocked_by"]
        read_only_fields = fields


class WatermarkCorrectionSerializer(serializers.Serializer):
    value = AnyJSONField(
        allow_null=True,
        help_text="the new value; for an int watermark the last committed item id",
    )
    position = serializers.IntegerField(
        required=False, min_value=-BIGINT, max_value=BIGINT, help_text="non-int watermarks only"
    )
    reason = serializers.CharField(max_length=2000)
    replay = serializers.BooleanField(
        default=False, help_text="confirm moving the watermark backwards (items are reprocessed)"
    )


class ConnectorEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = ConnectorEvent
        fields = ["id", "old_state", "new_state", "actor", "reason", "created_at"]
        read_only_fields = fields


class WatermarkEventSerializer(serializers.ModelSerializer):
    old_value = AnyJSONField(allow_null=True)
    new_value = AnyJSONField(allow_null=True)

    class Meta:
        model = WatermarkEvent
        fields = [
            "id",
            "old_position",
            "new_position",
            "old_value",
            "new_value",
            "source",
            "batch",
            "actor",
            "reason",
            "is_replay",
            "created_at",
        ]
        read_only_fields = fields


class JobSerializer(serializers.ModelSerializer):
    connector = serializers.SlugRelatedField(read_only=True, slug_field="name")
    params = PublicJSONField()
    sink = PublicJSONField()
    watermark = WatermarkSerializer(read_only=True)
    weight_unit = serializers.CharField(
        source="connector.weight_unit", read_only=True, help_text=WEIGHT_UNIT_HELP
    )

    class Meta:
        model = Job
        fields = [
            "name",
            "connector",
            "weight_unit",
            "watermark_type",
            "start_position",
            *JOB_SETTINGS,
            "watermark",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    lag = LagSerializer(allow_null=True, help_text="null when the items cannot be read now")
    blocked_by = BlockerSerializer(allow_null=True)
    batch_counts = serializers.DictField(child=serializers.IntegerField())

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "lag", "blocked_by", "batch_counts"]
        read_only_fields = fields


class JobWriteSerializer(serializers.ModelSerializer):
    """Validates job settings against the model's own bounds, so the database never refuses them."""

    connector = serializers.SlugRelatedField(slug_field="name", queryset=Connector.objects.all())
    params = serializers.DictField(required=False)
    sink = serializers.DictField(required=False)

    class Meta:
        model = Job
        fields = [*FIXED_JOB_FIELDS, *JOB_SETTINGS]

    def validate_name(self, value):
        if self.instance is None and Job.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"a job named {value!r} already exists")
        return value


# ---- batches -----------------------------------------------------------------------------------


class BatchSerializer(serializers.ModelSerializer):
    job = serializers.SlugRelatedField(read_only=True, slug_field="name")
    range_start = serializers.IntegerField(
        source="first_item", read_only=True, help_text="covers item ids from (inclusive)"
    )
    range_end = serializers.IntegerField(
        source="last_item",
        read_only=True,
        help_text="to (inclusive); ids in the range without an item are covered too",
    )
    watermark_value = AnyJSONField(allow_null=True)
    weight_unit = serializers.CharField(
        source="job.connector.weight_unit", read_only=True, help_text=WEIGHT_UNIT_HELP
    )

    class Meta:
        model = Batch
        fields = [
            "id",
            "job",
            "backfill",
            "kind",
            "status",
            "range_start",
            "range_end",
            "item_count",
            "weight",
            "weight_unit",
            "attempt",
            "max_attempts",
            "worker",
            "lease_expires_at",
            "next_attempt_at",
            "created_at",
            "started_at",
            "finished_at",
            "watermark_value",
            "skip_reason",
        ]
        read_only_fields = fields


class BatchAttemptSerializer(serializers.ModelSerializer):
    error = PublicJSONField()

    class Meta:
        model = BatchAttempt
        fields = ["number", "worker", "started_at", "finished_at", "outcome", "error"]
        read_only_fields = fields


class BatchDetailSerializer(BatchSerializer):
    attempts = BatchAttemptSerializer(many=True, read_only=True)
    config_snapshot = PublicJSONField()
    result = PublicJSONField()
    error = PublicJSONField()

    class Meta(BatchSerializer.Meta):
        fields = [*BatchSerializer.Meta.fields, "result", "error", "config_snapshot", "attempts"]
        read_only_fields = fields


class BatchItemSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    item = serializers.CharField(help_text="a file location, or the meta table's item")
    weight = serializers.IntegerField()


class AcquiredBatchSerializer(BatchDetailSerializer):
    items = BatchItemSerializer(many=True, read_only=True)

    class Meta(BatchDetailSerializer.Meta):
        fields = [*BatchDetailSerializer.Meta.fields, "items"]
        read_only_fields = fields


class AcquireSerializer(serializers.Serializer):
    worker = serializers.CharField(
        max_length=200, required=False, help_text="who takes the batch (default: api:<user>)"
    )
    lease_seconds = serializers.IntegerField(
        min_value=1, max_value=7 * 24 * 3600, required=False, help_text="default: the job's"
    )


class AttemptSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(
        min_value=1, max_value=SMALLINT, help_text="the fencing token from acquire/"
    )


class HeartbeatSerializer(AttemptSerializer):
    lease_seconds = serializers.IntegerField(min_value=1, max_value=7 * 24 * 3600, required=False)


class LeaseSerializer(serializers.Serializer):
    lease_expires_at = serializers.DateTimeField()


class SucceedSerializer(AttemptSerializer):
    result = serializers.DictField(
        required=False, default=dict, help_text="rows in/out, bytes, output location, metrics"
    )
    watermark_value = AnyJSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text="datetime / key_value / file_set watermarks: the value this batch reached",
    )


class FailSerializer(AttemptSerializer):
    error = serializers.DictField(help_text='e.g. {"type": "ValueError", "message": "..."}')


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class SkipSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class AssetSerializer(serializers.ModelSerializer):
    item = serializers.CharField(source="location", help_text="the file location")
    extra = PublicJSONField()

    class Meta:
        model = Asset
        fields = ["id", "item", "weight", "discovered_at", "extra"]
        read_only_fields = fields


class DiscoverResultSerializer(serializers.Serializer):
    connector = serializers.CharField()
    registered = serializers.IntegerField(help_text="files registered by this scan")


class AnnounceAssetsSerializer(serializers.Serializer):
    # each element is checked by the service (inventory.services.assets), naming assets[i].field
    assets = serializers.ListField(
        child=serializers.JSONField(),
        help_text="[{location: str, weight: int >= 0 (default 1), extra: object}]",
    )


class AnnouncedAssetSerializer(serializers.Serializer):
    location = serializers.CharField()
    id = serializers.IntegerField()


class AnnounceResultSerializer(serializers.Serializer):
    connector = serializers.CharField()
    registered = serializers.IntegerField(help_text="new locations")
    known = serializers.IntegerField(help_text="locations registered before (left alone)")
    assets = AnnouncedAssetSerializer(many=True)


class RunResultSerializer(serializers.Serializer):
    job = serializers.CharField()
    planned = serializers.ListField(child=serializers.IntegerField())
    dispatched = serializers.ListField(child=serializers.IntegerField())
    reason = serializers.CharField(allow_blank=True, help_text="why nothing was planned, if so")


# ---- backfills ---------------------------------------------------------------------------------


class BackfillProgressSerializer(serializers.Serializer):
    batches_total = serializers.IntegerField()
    batches_done = serializers.IntegerField(help_text="succeeded or skipped")
    batches_running = serializers.IntegerField()
    batches_dead = serializers.IntegerField()
    batches_cancelled = serializers.IntegerField()
    weight_total = serializers.IntegerField()
    weight_done = serializers.IntegerField()
    percent = serializers.FloatField(help_text="weight done / weight total, 0-100")


class BackfillSerializer(serializers.ModelSerializer):
    job = serializers.SlugRelatedField(read_only=True, slug_field="name")
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Backfill
        fields = [
            "id",
            "job",
            "range_start",
            "range_end",
            "batch_weight",
            "max_items",
            "max_concurrency",
            "priority",
            "status",
            "reason",
            "requested",
            "created_by",
            "created_at",
            "updated_at",
            "progress",
        ]
        read_only_fields = fields

    @extend_schema_field(BackfillProgressSerializer)
    def get_progress(self, backfill) -> dict:
        total = backfill.weight_total
        return {
            "batches_total": backfill.batches_total,
            "batches_done": backfill.batches_done,
            "batches_running": backfill.batches_running,
            "batches_dead": backfill.batches_dead,
            "batches_cancelled": backfill.batches_cancelled,
            "weight_total": total,
            "weight_done": backfill.weight_done,
            "percent": round(100.0 * backfill.weight_done / total, 2) if total else 100.0,
        }


@extend_schema_field({"oneOf": [{"type": "string", "format": "date-time"}, {"type": "integer"}]})
class TimeOrValueField(serializers.Field):
    """An ISO 8601 time with a UTC offset, or an integer for a table read by an integer column;
    what it means is the job's source's business (backfills.backfill_range_for_times)."""

    default_error_messages = {
        "invalid": "must be an ISO 8601 time with a UTC offset (an integer for a table "
        "connector read by an integer column)"
    }

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, str | int):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class BackfillPlanSerializer(serializers.Serializer):
    """A closed range of a job, by item ids or by time (exactly one of the two pairs), and the
    batch budget to cover it with."""

    job = serializers.SlugRelatedField(slug_field="name", queryset=Job.objects.all())
    range_start = serializers.IntegerField(
        min_value=-BIGINT, max_value=BIGINT, required=False, help_text="first item id"
    )
    range_end = serializers.IntegerField(
        min_value=-BIGINT, max_value=BIGINT - 1, required=False, help_text="last item id"
    )
    time_start = TimeOrValueField(
        required=False,
        help_text="instead of the ids: the first time, ISO 8601 with a UTC offset (table "
        "connectors: the read column's value; files: registration time; job_output: commit "
        "time). An integer for a table read by an integer column",
    )
    time_end = TimeOrValueField(required=False, help_text="the last time (inclusive)")
    batch_weight = serializers.IntegerField(
        min_value=1, max_value=BIGINT, required=False, help_text="default: the job's"
    )
    max_items = serializers.IntegerField(
        min_value=1, max_value=INT, required=False, help_text="default: the job's"
    )

    def validate(self, attrs):
        # which pair, and that it is whole: backfills.backfill_range (the dashboard's rule too)
        if "range_start" in attrs and "range_end" in attrs:
            if attrs["range_end"] < attrs["range_start"]:
                raise serializers.ValidationError(
                    {"range_end": ["must not be before range_start (the range is inclusive)"]}
                )
        return attrs


class BackfillCreateSerializer(BackfillPlanSerializer):
    max_concurrency = serializers.IntegerField(min_value=1, max_value=SMALLINT, default=1)
    priority = serializers.IntegerField(
        min_value=-SMALLINT - 1,
        max_value=SMALLINT,
        default=0,
        help_text="above 0 runs before incremental work, below 0 after it",
    )
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    fingerprint = serializers.RegexField(
        r"^[0-9a-f]{16}$",
        required=False,
        help_text="a preview's fingerprint: run exactly that plan, or 409 if it changed",
    )


class PlannedBatchSerializer(serializers.Serializer):
    range_start = serializers.IntegerField()
    range_end = serializers.IntegerField()
    item_count = serializers.IntegerField()
    weight = serializers.IntegerField()


class BackfillRequestedSerializer(serializers.Serializer):
    by = serializers.ChoiceField(choices=["time", "value"])
    basis = serializers.CharField(help_text="what was compared, e.g. 'column updated_at'")
    start = TimeOrValueField()
    end = TimeOrValueField()


class BackfillPreviewSerializer(serializers.Serializer):
    job = serializers.CharField()
    range_start = serializers.IntegerField(help_text="the first item id (resolved from a time)")
    range_end = serializers.IntegerField(help_text="the last item id")
    requested = BackfillRequestedSerializer(
        allow_null=True, help_text="the time range the ids came from; null when given by ids"
    )
    batch_count = serializers.IntegerField()
    total_items = serializers.IntegerField()
    total_weight = serializers.IntegerField()
    weight_unit = serializers.CharField(help_text=WEIGHT_UNIT_HELP)
    fingerprint = serializers.CharField(
        help_text="names this exact plan: give it when creating the backfill to run exactly it"
    )
    batches = PlannedBatchSerializer(many=True)

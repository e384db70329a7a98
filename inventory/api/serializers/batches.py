"""Batches' shapes, their attempts, and what an external processing application sends (acquire,
heartbeat, succeed, fail)."""

from rest_framework import serializers

from inventory.api.serializers.connectors import WEIGHT_UNIT_HELP
from inventory.api.serializers.fields import AnyJSONField, PublicJSONField
from inventory.api.serializers.strict import Input
from inventory.bounds import BIGINT, SMALLINT
from inventory.models import Batch, BatchAttempt
from inventory.services.lifecycle import MAX_BATCHES_PER_CALL
from inventory.services.reasons import REASON_MAX


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


class AcquireSerializer(Input):
    worker = serializers.CharField(
        max_length=200, required=False, help_text="who takes the batch (default: api:<user>)"
    )
    lease_seconds = serializers.IntegerField(
        min_value=1, max_value=7 * 24 * 3600, required=False, help_text="default: the job's"
    )


class AcquireBatchesSerializer(AcquireSerializer):
    count = serializers.IntegerField(
        min_value=1,
        max_value=MAX_BATCHES_PER_CALL,
        help_text=f"how many batches to take at most (1 to {MAX_BATCHES_PER_CALL})",
    )


class AcquiredBatchesSerializer(Input):
    batches = AcquiredBatchSerializer(many=True, read_only=True)


class AttemptSerializer(Input):
    attempt = serializers.IntegerField(
        min_value=1, max_value=SMALLINT, help_text="the fencing token from acquire/"
    )


class HeartbeatSerializer(AttemptSerializer):
    lease_seconds = serializers.IntegerField(
        min_value=1,
        max_value=7 * 24 * 3600,
        required=False,
        help_text="the lease from now (default: the job's); a heartbeat never shortens a lease",
    )


class LeaseSerializer(Input):
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


class BatchCommitSerializer(SucceedSerializer):
    id = serializers.IntegerField(min_value=1, max_value=BIGINT, help_text="the batch's id")


class SucceedBatchesSerializer(Input):
    batches = BatchCommitSerializer(
        many=True,
        allow_empty=False,
        max_length=MAX_BATCHES_PER_CALL,
        help_text=f"1 to {MAX_BATCHES_PER_CALL} batches of the job, each committed as succeed/ "
        "commits one",
    )


class RefusedCommitSerializer(Input):
    id = serializers.IntegerField()
    reason = serializers.CharField()


class SucceededBatchesSerializer(Input):
    committed = BatchDetailSerializer(many=True, read_only=True)
    refused = RefusedCommitSerializer(many=True, read_only=True)


class FailSerializer(AttemptSerializer):
    error = serializers.DictField(help_text='e.g. {"type": "ValueError", "message": "..."}')


class CancelSerializer(Input):
    reason = serializers.CharField(
        max_length=REASON_MAX, required=False, allow_blank=True, default=""
    )


class SkipSerializer(Input):
    reason = serializers.CharField(max_length=REASON_MAX)

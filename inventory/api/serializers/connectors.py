"""Connectors' shapes, and their assets: discovered, announced by a producer."""

from urllib.parse import urlencode

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory.api.serializers.fields import AnyJSONField, PublicJSONField
from inventory.api.serializers.strict import Input
from inventory.models import Asset, Connector, ConnectorKind
from inventory.services.reasons import REASON_MAX
from inventory.sources import registry as source_kinds

WEIGHT_UNIT_HELP = (
    "what one unit of weight is: `bytes` (files, object stores, Delta, Hudi, job outputs), `rows` (a "
    "table read in slices), `messages` (Kafka), or empty (a meta table's own weight column)"
)


class ConnectorSerializer(serializers.ModelSerializer):
    config = PublicJSONField(
        help_text="the connector's config; `*_env` values are environment-variable names"
    )
    job_count = serializers.SerializerMethodField(
        help_text="how many jobs read the connector (the jobs themselves: `jobs_url`, paged)"
    )
    jobs_url = serializers.SerializerMethodField(
        help_text="the job list filtered to this connector's jobs (`/api/v1/jobs/?connector__name=`), paged"
    )
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
            "job_count",
            "jobs_url",
            "weight_unit",
            "config_derived",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_job_count(self, connector: Connector) -> int:
        # annotated by the list and detail views (one query for a page); counted otherwise
        counted = getattr(connector, "job_count", None)
        return counted if counted is not None else connector.jobs.count()

    def get_jobs_url(self, connector: Connector) -> str:
        path = f"{reverse('api:job-list')}?{urlencode({'connector__name': connector.name})}"
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path

    @extend_schema_field(serializers.DictField())
    def get_config_derived(self, connector: Connector) -> dict:
        return source_kinds.config_derived(connector)


class ConnectorCreateSerializer(Input):
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


class ConnectorUpdateSerializer(Input):
    """Name and kind are fixed; config, labels and start_after may change (the source identity in
    the config only without jobs: see reset/)."""

    config = serializers.DictField(required=False)
    labels = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    start_after = serializers.CharField(max_length=100, required=False, allow_blank=True)


class ConnectorResetSerializer(Input):
    config = serializers.DictField(
        help_text="the new config, source identity (path, meta_table, table, topic) included"
    )
    reason = serializers.CharField(
        max_length=REASON_MAX, help_text="recorded on each job's watermark"
    )


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


class AnnounceAssetsSerializer(Input):
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

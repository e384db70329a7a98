"""Query filters for list endpoints (django-filter); bad values give 400 naming the parameter."""

import django_filters

from inventory.models import Backfill, BackfillStatus, Batch, BatchKind, BatchStatus


class BatchFilter(django_filters.FilterSet):
    job = django_filters.CharFilter(field_name="job__name", help_text="job name")
    status = django_filters.MultipleChoiceFilter(
        choices=BatchStatus.choices, help_text="repeat for several statuses"
    )
    kind = django_filters.ChoiceFilter(choices=BatchKind.choices)
    backfill = django_filters.NumberFilter(
        field_name="backfill_id", min_value=1, max_value=2**63 - 1, help_text="backfill id"
    )
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    finished_after = django_filters.IsoDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = django_filters.IsoDateTimeFilter(field_name="finished_at", lookup_expr="lt")

    class Meta:
        model = Batch
        fields = [
            "job",
            "status",
            "kind",
            "backfill",
            "created_after",
            "created_before",
            "finished_after",
            "finished_before",
        ]


class BackfillFilter(django_filters.FilterSet):
    job = django_filters.CharFilter(field_name="job__name", help_text="job name")
    status = django_filters.MultipleChoiceFilter(choices=BackfillStatus.choices)

    class Meta:
        model = Backfill
        fields = ["job", "status"]

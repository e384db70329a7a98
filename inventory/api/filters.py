"""Query filters for list endpoints (django-filter); bad values and unknown parameters give 400
naming the parameter."""

from datetime import UTC

import django_filters
from django import forms
from django_filters.fields import IsoDateTimeField
from django_filters.rest_framework import DjangoFilterBackend

from inventory.api.paging import refuse_unknown_parameters
from inventory.models import Backfill, BackfillStatus, Batch, BatchKind, BatchStatus, Job


class UTCIsoDateTimeField(IsoDateTimeField):
    """ISO 8601, converted to UTC here: PostgreSQL refuses offsets beyond +-15:59 that Python
    accepts, and a query the database refuses must not be how bad input is found."""

    def to_python(self, value):
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(UTC)
        except (OverflowError, ValueError):
            raise forms.ValidationError("out of range", code="invalid") from None


class UTCIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCIsoDateTimeField


class StrictBooleanField(forms.Field):
    """`true` or `false` (also `1`, `0`, any case); anything else is refused. django-filter's own
    boolean reads every other word (`maybe`, `yes`) as no filter at all, so the whole list came
    back as if it had been asked for."""

    def to_python(self, value):
        if value in (None, ""):
            return None
        word = str(value).strip().lower()
        if word in ("true", "1"):
            return True
        if word in ("false", "0"):
            return False
        raise forms.ValidationError("must be true or false", code="invalid")


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField

    def __init__(self, *args, **kwargs):
        # the raw text reaches the field: the boolean select widget turns a bad word into None
        kwargs.setdefault("widget", forms.TextInput)
        super().__init__(*args, **kwargs)


class JobFilter(django_filters.FilterSet):
    connector__name = django_filters.CharFilter(field_name="connector__name")
    paused = StrictBooleanFilter(field_name="paused", help_text="true or false")

    class Meta:
        model = Job
        fields = ["connector__name", "paused"]


class BatchFilter(django_filters.FilterSet):
    job = django_filters.CharFilter(field_name="job__name", help_text="job name")
    status = django_filters.MultipleChoiceFilter(
        choices=BatchStatus.choices, help_text="repeat for several statuses"
    )
    kind = django_filters.ChoiceFilter(choices=BatchKind.choices)
    backfill = django_filters.NumberFilter(
        field_name="backfill_id", min_value=1, max_value=2**63 - 1, help_text="backfill id"
    )
    created_after = UTCIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UTCIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    finished_after = UTCIsoDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = UTCIsoDateTimeFilter(field_name="finished_at", lookup_expr="lt")

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


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter, with an allow-list: a query parameter that is neither one of the view's
    declared filters nor a paging parameter is a 400 naming it. A lookup such as
    `config__password__startswith`, `name__regex` or `ordering=-config` is refused, never
    silently ignored, and never reaches the ORM."""

    def filter_queryset(self, request, queryset, view):
        filterset_class = self.get_filterset_class(view, queryset)
        filters = set(filterset_class.base_filters) if filterset_class else set()
        refuse_unknown_parameters(request, view, filters)
        return super().filter_queryset(request, queryset, view)

"""Dashboard forms: they only shape input; the services validate and act. Each number is bounded
by the column it is stored in (inventory.bounds), as the API's serializers bound it, so a value the
database cannot hold is a form error naming the field."""

from django import forms

from inventory.bounds import BIGINT, INT, SMALLINT
from inventory.models import Job
from inventory.services.reasons import REASON_MAX


def _id(**kwargs) -> forms.IntegerField:
    return forms.IntegerField(min_value=-BIGINT, max_value=BIGINT, **kwargs)


def _weight(**kwargs) -> forms.IntegerField:
    return forms.IntegerField(min_value=1, max_value=BIGINT, **kwargs)


def _items(**kwargs) -> forms.IntegerField:
    return forms.IntegerField(min_value=1, max_value=INT, **kwargs)


def _concurrency(**kwargs) -> forms.IntegerField:
    return forms.IntegerField(min_value=1, max_value=SMALLINT, **kwargs)


def _priority(**kwargs) -> forms.IntegerField:
    return forms.IntegerField(min_value=-SMALLINT - 1, max_value=SMALLINT, **kwargs)


class BackfillForm(forms.Form):
    # a text field, not a select: a select renders every job on every page view
    job = forms.ModelChoiceField(
        queryset=Job.objects.all(),
        to_field_name="name",
        widget=forms.TextInput(attrs={"placeholder": "job name"}),
        error_messages={"invalid_choice": "there is no job with that name"},
    )
    by = forms.ChoiceField(
        choices=[("ids", "by item ids"), ("time", "by time")],
        initial="ids",
        required=False,  # ids unless "time" is chosen
        widget=forms.RadioSelect,
        label="range",
    )
    # which pair is required, and what a time means for the job: backfills.backfill_range
    range_start = _id(label="first item id", required=False)
    range_end = forms.IntegerField(
        min_value=-BIGINT, max_value=BIGINT - 1, label="last item id", required=False
    )
    time_start = forms.CharField(
        label="from",
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "2026-11-01T00:00:00+00:00"}),
    )
    time_end = forms.CharField(
        label="to (inclusive)",
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "2026-11-02T00:00:00+00:00"}),
    )
    batch_weight = _weight(required=False, help_text="default: the job's")
    max_items = _items(required=False, help_text="default: the job's")
    max_concurrency = _concurrency(initial=1)
    priority = _priority(initial=0, help_text="> 0 runs before incremental work")
    reason = forms.CharField(required=False, max_length=REASON_MAX, widget=forms.TextInput)
    # set by the live preview (hx-swap-oob): scheduling runs exactly the plan shown, or shows
    # how it changed (backfills.backfill_create, PlanChanged)
    fingerprint = forms.RegexField(r"^[0-9a-f]{16}$", required=False, widget=forms.HiddenInput)
    previewed = forms.CharField(required=False, max_length=200, widget=forms.HiddenInput)


class GapRangeForm(forms.Form):
    lower = _id(required=False, label="from item id")
    upper = _id(required=False, label="to item id (exclusive)")


class HolesBackfillForm(GapRangeForm):
    batch_weight = _weight(required=False)
    max_items = _items(required=False)
    max_concurrency = _concurrency(required=False)
    priority = _priority(required=False)
    reason = forms.CharField(required=False, max_length=REASON_MAX)
    preview = forms.BooleanField(required=False)
    fingerprint = forms.RegexField(r"^[0-9a-f]{16}$", required=False)


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=REASON_MAX)


class ThrottleForm(forms.Form):
    connector = forms.CharField(
        max_length=100, required=False, help_text="empty: the budget of all connectors"
    )
    weight_per_minute = _weight(required=False, help_text="empty: remove the budget")

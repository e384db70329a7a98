"""Dashboard forms: they only shape input; the services validate and act."""

from django import forms

from inventory.models import Job


class BackfillForm(forms.Form):
    job = forms.ModelChoiceField(queryset=Job.objects.order_by("name"), to_field_name="name")
    range_start = forms.IntegerField(label="first item id")
    range_end = forms.IntegerField(label="last item id")
    batch_weight = forms.IntegerField(required=False, min_value=1, help_text="default: the job's")
    max_items = forms.IntegerField(required=False, min_value=1, help_text="default: the job's")
    max_concurrency = forms.IntegerField(initial=1, min_value=1)
    priority = forms.IntegerField(initial=0, help_text="> 0 runs before incremental work")
    reason = forms.CharField(required=False, widget=forms.TextInput)


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=2000)

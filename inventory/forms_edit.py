"""Dashboard forms that create and change connectors and jobs. They only parse what a browser
sends (JSON text, comma lists, numbers); the API's own serializers and the services validate, and
their messages are put beside the field they name (`attach_errors`)."""

import json

from django import forms

from inventory.models import ConnectorKind, Job, WatermarkType
from inventory.services.jobs import FIXED_JOB_FIELDS, JOB_SETTINGS

JSON_ROWS = 4


class JSONText(forms.CharField):
    """A JSON object typed as text: {} when left empty."""

    widget = forms.Textarea(attrs={"rows": JSON_ROWS, "spellcheck": "false", "class": "code"})

    def to_python(self, value):
        text = (value or "").strip()
        if not text:
            return {}
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"is not JSON: {exc.msg} (line {exc.lineno})") from exc
        if not isinstance(parsed, dict):
            raise forms.ValidationError("must be a JSON object, {...}")
        return parsed

    def prepare_value(self, value):
        return value if isinstance(value, str) else json.dumps(value or {}, indent=2)


class CommaList(forms.CharField):
    def to_python(self, value):
        return [part.strip() for part in (value or "").split(",") if part.strip()]

    def prepare_value(self, value):
        return value if isinstance(value, str) else ", ".join(value or [])


class ConnectorEditForm(forms.Form):
    name = forms.SlugField(max_length=100, help_text="letters, digits, - and _; fixed once created")
    kind = forms.ChoiceField(choices=ConnectorKind.choices, help_text="fixed once created")
    config = JSONText(
        required=False,
        help_text='e.g. {"path": "/data/orders", "format": "parquet"}; credentials by '
        "environment-variable name (*_env), never the secret itself",
    )
    labels = CommaList(required=False, help_text="comma-separated")
    start_after = forms.CharField(
        max_length=100, required=False, help_text="a connector's name or label to wait for"
    )

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.editing = editing
        if editing:
            for fixed in ("name", "kind"):
                self.fields[fixed].disabled = True

    def payload(self) -> dict:
        """What the API takes: POST connectors/ when creating, PATCH connectors/{name}/ else."""
        data = dict(self.cleaned_data)
        if self.editing:
            data.pop("name"), data.pop("kind")
        return data


_JOB_HELP = {
    "processor": "a registered processor's name",
    "params": "the processor's parameters, a JSON object",
    "sink": 'e.g. {"kind": "parquet", "path": "/out/orders", "key": ["id"]}',
    "batch_weight": "the weight budget of one batch",
    "max_items": "at most this many items per batch",
    "schedule_seconds": "run every N seconds (empty: on demand and on discovery)",
    "lookback": "re-read this window before the watermark on every run",
    "restatements": "when input already committed changes: rebuild at once, or propose the "
    "replay for an operator to apply (job page)",
}


class JobEditForm(forms.Form):
    """Every field the API's job serializer takes, with the model's widgets and bounds."""

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.editing = editing
        model_fields = forms.fields_for_model(
            Job, fields=[f for f in (*FIXED_JOB_FIELDS, *JOB_SETTINGS) if f != "connector"]
        )
        order = [*FIXED_JOB_FIELDS, *JOB_SETTINGS]
        for name in order:
            if name == "connector":
                field = forms.CharField(max_length=100, help_text="the connector's name")
            elif name in ("params", "sink"):
                field = JSONText(required=False)
            else:
                field = model_fields[name]
            if name in _JOB_HELP:
                field.help_text = _JOB_HELP[name]
            if name in FIXED_JOB_FIELDS:
                field.disabled = editing
                field.help_text = (field.help_text + "; " if field.help_text else "") + (
                    "fixed once created"
                )
            self.fields[name] = field
        self.fields["watermark_type"].initial = WatermarkType.INT

    def payload(self) -> dict:
        """What the API takes: the changed settings when editing, every given field else."""
        data = {k: v for k, v in self.cleaned_data.items() if v is not None}
        if self.editing:
            data = {k: v for k, v in data.items() if k in self.changed_data}
            for fixed in FIXED_JOB_FIELDS:
                data.pop(fixed, None)
        return data

    @staticmethod
    def initial_of(job: Job) -> dict:
        initial = {name: getattr(job, name) for name in (*FIXED_JOB_FIELDS, *JOB_SETTINGS)}
        initial["connector"] = job.connector.name
        return initial


def attach_errors(form: forms.Form, errors) -> None:
    """Put a serializer's errors ({field: [reasons]}) or a service's InvalidInput beside their
    field; a field the form lacks (a config key, a sink option) goes to the nearest one that has
    it, named in the message, else to the top of the form."""
    if isinstance(errors, Exception):  # a service's InvalidInput, Conflict, ...
        message = getattr(errors, "message", "") or str(errors)
        errors = {getattr(errors, "field", None) or "__all__": [message]}
    for field, reasons in dict(errors).items():
        reasons = reasons if isinstance(reasons, list | tuple) else [reasons]
        for reason in reasons:
            reason = _text(reason)
            target = None if field in ("__all__", "non_field_errors") else _home(form, str(field))
            if target not in (field, None):
                reason = f"{field}: {reason}"
            form.add_error(target, reason)


def _home(form, field: str) -> str | None:
    if field in form.fields:
        return field
    head = field.split(".", 1)[0]
    if head in form.fields:
        return head
    for json_field in ("config", "sink", "params"):
        if json_field in form.fields:
            return json_field
    return None


def _text(reason) -> str:
    if isinstance(reason, dict):  # a nested serializer error: {"key": ["reason"]}
        return "; ".join(
            f"{k}: {_text(v[0] if isinstance(v, list) else v)}" for k, v in reason.items()
        )
    return str(reason)

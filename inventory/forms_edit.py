"""Dashboard forms that create and change connectors and jobs. They only parse what a browser
sends (JSON text, comma lists, numbers); the API's own serializers and the services validate, and
their messages are put beside the field they name (`attach_errors`)."""

import json
import re
from decimal import Decimal, InvalidOperation

from django import forms
from django.utils.html import escape
from django.utils.safestring import mark_safe

from inventory.models import Connector, ConnectorKind, Job, WatermarkType
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


class Datalist(forms.TextInput):
    """A text input offering a list of known values (an HTML datalist) while taking any text:
    the names the form offers, the service checks."""

    def __init__(self, options=(), attrs=None):
        super().__init__(attrs)
        self.options = list(options)

    def render(self, name, value, attrs=None, renderer=None):
        listed = f"{(attrs or {}).get('id') or name}-options"
        attrs = {**(attrs or {}), "list": listed, "autocomplete": "off"}
        html = super().render(name, value, attrs, renderer)
        options = "".join(f'<option value="{escape(option)}"></option>' for option in self.options)
        return mark_safe(f'{html}<datalist id="{listed}">{options}</datalist>')


# the sink kinds a job may write (workers/spark/sinks.py: SINK_KEYS), each with an example of its
# settings that the job form accepts as it is (tests/dashboard/test_forms.py checks them)
SINK_EXAMPLES = {
    "files": {"path": "/data/out/orders", "format": "parquet"},
    "postgres": {"table": "orders", "mode": "upsert", "key": ["id"], "dsn_env": "SINK_DSN"},
    "delta": {"path": "/data/out/orders-delta"},
    "iceberg": {
        "catalog_uri": "sqlite:////data/iceberg/catalog.db",
        "warehouse": "/data/iceberg/warehouse",
        "table": "sales.orders",
    },
}
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_COUNT_UNITS = ("rows", "row", "messages", "message", "items", "item")
_WEIGHT = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


class WeightField(forms.Field):
    """A batch weight typed in its unit: a size for bytes ("50 MB", "512 kB", "2 GB", decimal
    units as the pages show them), a count for rows and messages ("10000", "10,000 rows");
    the number of bytes, rows or messages it means."""

    widget = forms.TextInput(attrs={"maxlength": 40, "inputmode": "decimal"})

    def to_python(self, value):
        text = (value or "").strip()
        if not text:
            return None
        match = _WEIGHT.match(text)
        unit = match.group(2).lower() if match else ""
        if not match or (unit not in _SIZE_UNITS and unit not in _COUNT_UNITS):
            raise forms.ValidationError(
                f"{text!r} is not a weight: give a number with a unit, e.g. 50 MB, 512 kB, "
                "2 GB, or a count of rows or messages, e.g. 10000"
            )
        try:
            number = Decimal(match.group(1).replace(",", "").replace("_", ""))
        except InvalidOperation:
            raise forms.ValidationError(f"{text!r} is not a number") from None
        weight = number * _SIZE_UNITS.get(unit, 1)
        if weight != int(weight):
            raise forms.ValidationError(
                f"{text!r} is not a whole number of bytes, rows or messages"
            )
        self.unit_given = "bytes" if unit in _SIZE_UNITS and unit else unit
        return int(weight)

    def prepare_value(self, value):
        if isinstance(value, int) and not isinstance(value, bool):
            return exact_size(value)
        return value


def exact_size(value: int) -> str:
    """A weight shown in the largest decimal unit that holds it exactly (50000000 -> "50 MB"),
    so that saving the form unchanged keeps it; a count below 1000 as it is."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if value and value % size == 0:
            return f"{value // size} {unit}"
    return str(value)


_JOB_HELP = {
    "processor": "a registered processor's name (the list shows those installed here)",
    "params": "the processor's parameters, a JSON object",
    "sink_kind": "where the output goes; its settings below",
    "sink": "the sink's settings, e.g. "
    + "; ".join(f"{kind}: {json.dumps(example)}" for kind, example in SINK_EXAMPLES.items()),
    "batch_weight": "the weight budget of one batch, in the connector's unit: a size for files "
    "(50 MB, 512 kB, 2 GB), a count for tables and topics (10000 rows, 5000 messages)",
    "max_items": "at most this many items per batch",
    "schedule_seconds": "run every N seconds (empty: on demand and on discovery)",
    "lookback": "re-read this window before the watermark on every run",
    "restatements": "when input already committed changes: rebuild at once, or propose the "
    "replay for an operator to apply (job page)",
    "freshness_target_seconds": "freshness target: the oldest item waiting is at most this many "
    "seconds old (empty: none); backfills slow down while a job misses its target",
    "freshness_target_items": "freshness target: at most this many items waiting (empty: none)",
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
                field = forms.CharField(
                    max_length=100,
                    help_text="the connector's name",
                    widget=Datalist(Connector.objects.values_list("name", flat=True)),
                )
            elif name == "processor":
                field = forms.CharField(
                    max_length=100, initial="passthrough", widget=Datalist(_processor_names())
                )
            elif name in ("params", "sink"):
                field = JSONText(required=False)
            elif name == "batch_weight":
                field = WeightField()
            else:
                field = model_fields[name]
            if name == "sink":
                self.fields["sink_kind"] = forms.ChoiceField(
                    label="Sink kind",
                    required=False,
                    choices=[("", "none, or as the settings say")]
                    + [(kind, kind) for kind in SINK_EXAMPLES],
                    help_text=_JOB_HELP["sink_kind"],
                )
            if name in _JOB_HELP:
                field.help_text = _JOB_HELP[name]
            if name in FIXED_JOB_FIELDS:
                field.disabled = editing
                field.help_text = (field.help_text + "; " if field.help_text else "") + (
                    "fixed once created"
                )
            self.fields[name] = field
        self.fields["watermark_type"].initial = WatermarkType.INT

    def clean(self):
        data = super().clean()
        kind, sink = data.get("sink_kind"), data.get("sink")
        if kind and isinstance(sink, dict):
            if sink.get("kind") not in (None, kind):
                self.add_error(
                    "sink_kind", f"the settings name another kind ({sink['kind']!r}): choose one"
                )
            else:
                data["sink"] = {"kind": kind, **sink}
        unit = getattr(self.fields["batch_weight"], "unit_given", "")
        if unit and data.get("batch_weight") is not None:
            expected = self._weight_unit(data)
            if expected in ("rows", "messages") and unit == "bytes":
                self.add_error(
                    "batch_weight", f"this connector's weight is counted in {expected}, not bytes"
                )
            elif expected == "bytes" and unit in _COUNT_UNITS:
                self.add_error(
                    "batch_weight", "this connector's weight is bytes: give a size, e.g. 50 MB"
                )
        return data

    def _weight_unit(self, data) -> str:
        name = self.initial.get("connector") if self.editing else data.get("connector")
        connector = Connector.objects.filter(name=name).only("kind", "config").first()
        return connector.weight_unit if connector else ""

    def payload(self) -> dict:
        """What the API takes: the changed settings when editing, every given field else."""
        data = {k: v for k, v in self.cleaned_data.items() if v is not None}
        data.pop("sink_kind", None)
        if self.editing:
            # an emptied freshness target removes it
            for name in ("freshness_target_seconds", "freshness_target_items"):
                if name in self.changed_data and self.cleaned_data.get(name) is None:
                    data[name] = None
            changed = set(self.changed_data)
            if "sink_kind" in changed:
                changed.add("sink")
            data = {k: v for k, v in data.items() if k in changed}
            for fixed in FIXED_JOB_FIELDS:
                data.pop(fixed, None)
        return data

    @staticmethod
    def initial_of(job: Job) -> dict:
        initial = {name: getattr(job, name) for name in (*FIXED_JOB_FIELDS, *JOB_SETTINGS)}
        initial["connector"] = job.connector.name
        sink = dict(job.sink or {})
        initial["sink_kind"] = sink.pop("kind", "") if sink.get("kind") in SINK_EXAMPLES else ""
        initial["sink"] = sink if initial["sink_kind"] else job.sink
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


def _processor_names() -> list[str]:
    from inventory.services.job_config import processors_load

    try:
        return processors_load()
    except Exception:  # a broken processor package: the form still opens, the save names it
        return []

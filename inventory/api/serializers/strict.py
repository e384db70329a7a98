"""Input serializers that refuse what they do not know. DRF drops a body's unknown keys without a
word, so a misspelt `batch_weigth` in a PATCH answered 200 and changed nothing, and a backfill
asked with `priorty` ran at the default priority. Here each unknown key is a 400 naming it, with
what the call accepts."""

from collections.abc import Mapping

from rest_framework import serializers

# what a form posted by DRF's browsable API carries besides the fields
FORM_EXTRAS = frozenset({"csrfmiddlewaretoken"})


class KnownFieldsOnly:
    """Mixed into an input serializer (before the DRF base class)."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields) - FORM_EXTRAS)
            if unknown:
                accepted = (
                    ", ".join(
                        sorted(name for name, field in self.fields.items() if not field.read_only)
                    )
                    or "no body (send none, or {})"
                )
                raise serializers.ValidationError(
                    {name: [f"unknown field; this call accepts {accepted}"] for name in unknown}
                )
        return super().to_internal_value(data)


class Input(KnownFieldsOnly, serializers.Serializer):
    """The base of the input serializers that are not model serializers."""


class NoBody(Input):
    """The body of a call that reads none (pause, resume, run, discover, retry): any key is
    refused, so `retry/` with `{"max_attempts": 5}` is not done as if it had been read."""

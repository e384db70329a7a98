"""The OpenAPI schema's generator: drf-spectacular's, with what it leaves out of a body put in.

- A component's description is a docstring about that body: drf-spectacular falls back on a base
  class's, which put the strict bases' notes for developers ("The base of the input serializers
  ...") on most bodies. A body's description from a serializer it extends is kept.
- A list of nested objects carries its bounds (`minItems`, `maxItems`): drf-spectacular writes
  them for a ListField's validators but not for a `many=True` serializer's `allow_empty` and
  `max_length`, which are checked all the same (`succeed-batches/` takes 1 to 100 batches)."""

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import is_list_serializer

from inventory.api.serializers import strict

# bases whose docstrings speak to developers, not of any one body
_BASES = (strict.Input, strict.KnownFieldsOnly)


def _described_by(cls: type) -> type | None:
    """The class whose docstring drf-spectacular takes for `cls`: the first in its MRO with one."""
    return next((c for c in cls.__mro__ if c.__dict__.get("__doc__")), None)


class TidemarkAutoSchema(AutoSchema):
    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if _described_by(type(serializer)) in _BASES:
            schema.pop("description", None)
        return schema

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if is_list_serializer(field) and schema and schema.get("type") == "array":
            if not field.allow_empty or field.min_length:
                schema["minItems"] = max(field.min_length or 0, 0 if field.allow_empty else 1)
            if field.max_length is not None:
                schema["maxItems"] = field.max_length
        return schema

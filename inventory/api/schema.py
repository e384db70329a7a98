"""The OpenAPI schema's generator: drf-spectacular's, with what it leaves out of a body put in.

- A component's description is a docstring about that body: drf-spectacular falls back on a base
  class's, which put the strict bases' notes for developers ("The base of the input serializers
  ...") on most bodies. A body's description from a serializer it extends is kept.
- A list of nested objects carries its bounds (`minItems`, `maxItems`): drf-spectacular writes
  them for a ListField's validators but not for a `many=True` serializer's `allow_empty` and
  `max_length`, which are checked all the same (`succeed-batches/` takes 1 to 100 batches).
- Every operation lists the answers every call can get (docs/api.md, "Errors"): 401 and 403 where
  a role is needed, 429 over the rate, and 400 on every write (a body or `?dry_run=` it does not
  take is refused) that does not list its own."""

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import is_list_serializer
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework.permissions import AllowAny

from inventory.api.serializers import strict
from inventory.api.serializers.fields import ErrorSerializer

_EVERY_CALL = {
    "401": OpenApiResponse(ErrorSerializer, description="no credentials, or a token not known"),
    "403": OpenApiResponse(ErrorSerializer, description="the user's role may not do this"),
    "429": OpenApiResponse(ErrorSerializer, description="over the rate; see Retry-After"),
}
_INVALID = OpenApiResponse(OpenApiTypes.OBJECT, description="invalid input: {field: [reason]}")

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

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        anonymous = any(isinstance(p, AllowAny) for p in self.view.get_permissions())
        for code, answer in _EVERY_CALL.items():
            if code != "429" and anonymous:
                continue
            if code not in responses:
                responses[code] = self._get_response_for_code(answer, code, direction=direction)
        if self.method in ("POST", "PUT", "PATCH") and "400" not in responses:
            responses["400"] = self._get_response_for_code(_INVALID, "400", direction=direction)
        return responses

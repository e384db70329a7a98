"""What every API viewset shares: lookups by name or id (unknown ones 404), newest-first paging, the
error responses the schema names."""

from contextlib import contextmanager

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import viewsets
from rest_framework.exceptions import ValidationError

from inventory.api import serializers as s
from inventory.api.serializers.strict import NoBody
from inventory.bounds import BIGINT
from inventory.services.errors import NotFound

NAME_PATTERN = r"[-a-zA-Z0-9_]+"
ID_PATTERN = r"[0-9]+"

ERRORS = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description="invalid input: {field: [reason]}"),
    404: OpenApiResponse(s.ErrorSerializer, description="unknown name or id"),
    409: OpenApiResponse(s.ErrorSerializer, description="the object's state does not allow it"),
}


def with_errors(ok: dict, *codes: int) -> dict:
    return {**ok, **{code: ERRORS[code] for code in codes}}


# `?dry_run=true` on the writes a pipelines file makes (create and change a connector or a job,
# reset a connector): the real call, every check and every lookup of the source included, in a
# transaction rolled back at its end; 200 with what would have been saved (its id is not kept).
# `tidemark plan` asks it for each change, so a plan says what the server would refuse.
DRY_RUN = OpenApiParameter(
    "dry_run",
    OpenApiTypes.BOOL,
    description="true: check everything the call checks and save nothing; 200 with what would "
    "be saved (an id in it is not kept)",
)


def dry_run_asked(request) -> bool:
    value = request.query_params.get("dry_run")
    if value is None or value in ("false", "0"):
        return False
    if value in ("true", "1"):
        return True
    raise ValidationError({"dry_run": ["must be true or false"]})


@contextmanager
def kept_unless(dry_run: bool):
    """The writes inside, undone at the end when `dry_run` (an error undoes them either way)."""
    if not dry_run:
        yield
        return
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


def no_body(request) -> None:
    """A call that reads no body refuses one that has keys (a 400 naming each)."""
    validated(NoBody, request)


def validated(serializer_class, request, **kwargs) -> dict:
    serializer = serializer_class(data=request.data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class NamedViewSet(viewsets.GenericViewSet):
    """Resources addressed by name; unknown names are 404 with the name in the message."""

    lookup_field = "name"
    lookup_value_regex = NAME_PATTERN
    noun = "object"

    def get_object(self):
        name = self.kwargs[self.lookup_field]
        obj = self.get_queryset().filter(name=name).first()
        if obj is None:
            raise NotFound(f"there is no {self.noun} named {name!r}")
        return obj


class IdViewSet(viewsets.GenericViewSet):
    lookup_value_regex = ID_PATTERN
    noun = "object"

    def object_id(self) -> int:
        value = int(self.kwargs["pk"])
        if value > BIGINT:
            raise NotFound(f"{self.noun} {value} does not exist")
        return value

    def get_object(self):
        pk = self.object_id()
        obj = self.get_queryset().filter(pk=pk).first()
        if obj is None:
            raise NotFound(f"{self.noun} {pk} does not exist")
        return obj

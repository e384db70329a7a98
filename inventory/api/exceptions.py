"""Service errors as HTTP: InvalidInput 400 {field: [reason]}, NotFound 404, Conflict 409; a body
that is not JSON 415 saying what the API reads.

A serializer's 400 has the same flat shape: a reason about a nested value is keyed by its path, as
the services name one (`batches[1].attempt`, `labels[0]`, `config.path`), not nested as DRF builds
it (`{"batches": [{}, {"attempt": [...]}]}`, `{"labels": {"0": [...]}}`).

Database errors that slip past validation are still the client's input, never a 500: an integrity
error is a conflict with existing data, a data error is a value the database cannot store.
"""

import logging

from django.db import DataError, IntegrityError
from rest_framework import status
from rest_framework.exceptions import UnsupportedMediaType, ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

from inventory.services.errors import Conflict, InvalidInput, NotFound, PlanChanged

log = logging.getLogger(__name__)


def exception_handler(exc, context):
    if isinstance(exc, InvalidInput):
        return Response({exc.field: [exc.message]}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, NotFound):
        return Response({"detail": str(exc)}, status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, Conflict):
        body = {"detail": str(exc), "code": type(exc).__name__.lower()}
        if isinstance(exc, PlanChanged):
            body["plan"] = exc.plan  # what would run now, to compare with the preview
        return Response(body, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, IntegrityError):
        log.warning("integrity error mapped to 409: %s", exc)
        return Response(
            {"detail": "the request conflicts with existing data: " + _first_line(exc)},
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, DataError):
        log.warning("data error mapped to 400: %s", exc)
        return Response({"non_field_errors": [_first_line(exc)]}, status=400)
    if isinstance(exc, UnsupportedMediaType):
        request = context.get("request")
        given = getattr(request, "content_type", "") or "none"
        return Response(
            {
                "detail": f"the API reads JSON bodies only: send the body as JSON with "
                f"Content-Type: application/json (this request's type: {given.split(';')[0]})"
            },
            status=status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
        )
    response = drf_exception_handler(exc, context)
    if (
        isinstance(exc, ValidationError)
        and response is not None
        and isinstance(response.data, dict)
    ):
        response.data = flat_errors(response.data)
    return response


def flat_errors(detail, path: str = "") -> dict:
    """DRF's nested validation errors as {path: [reason, ...]}: a list's element is `[i]`, a key
    `.key`, and a nested serializer's own (non-field) reasons belong to its path."""
    found: dict = {}
    if isinstance(detail, dict):
        for key, inner in detail.items():
            if key == api_settings.NON_FIELD_ERRORS_KEY and path:
                where = path
            elif isinstance(key, int):
                where = f"{path}[{key}]"  # a ListField's element, keyed by its index (an int)
            else:
                where = f"{path}.{key}" if path else str(key)
            for field, reasons in flat_errors(inner, where).items():
                found.setdefault(field, []).extend(reasons)
    elif isinstance(detail, list) and any(isinstance(inner, dict | list) for inner in detail):
        for index, inner in enumerate(detail):  # a many=True serializer: one entry per element
            if inner:
                for field, reasons in flat_errors(inner, f"{path}[{index}]").items():
                    found.setdefault(field, []).extend(reasons)
    else:
        found[path or api_settings.NON_FIELD_ERRORS_KEY] = (
            list(detail) if isinstance(detail, list) else [detail]
        )
    return found


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]

"""Service errors as HTTP: InvalidInput 400 {field: [reason]}, NotFound 404, Conflict 409; a body
that is not JSON 415 saying what the API reads.

Database errors that slip past validation are still the client's input, never a 500: an integrity
error is a conflict with existing data, a data error is a value the database cannot store.
"""

import logging

from django.db import DataError, IntegrityError
from rest_framework import status
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.response import Response
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
    return drf_exception_handler(exc, context)


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]

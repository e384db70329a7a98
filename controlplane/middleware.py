"""Request limits applied before any view runs."""

import json

from django.conf import settings
from django.http import HttpResponse


class RequestSizeLimitMiddleware:
    """Refuse a request whose declared body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE with 413.

    Django applies that limit only when a view reads `request.body` or a form; DRF's parsers read
    the stream instead, so without this an API client could send a body of any size. A body sent
    without a length (chunked) is not read past the limit by Django's LimitedStream either.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0:
            return _error(400, "Content-Length is not a number")
        if limit is not None and length > limit:
            return _error(413, f"the request body is larger than {limit} bytes")
        return self.get_response(request)


def _error(status: int, detail: str) -> HttpResponse:
    return HttpResponse(
        json.dumps({"detail": detail}), status=status, content_type="application/json"
    )

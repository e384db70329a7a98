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


class NulInQueryMiddleware:
    """NUL characters in a path or a query string never reach a view (PostgreSQL refuses them in text, so a
    filter or a search would answer 500): the API answers 400 naming the parameter; a page is
    rendered as if the NULs were not there (a dashboard search for `%00` is a search for "")."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path_info:
            # no name Tidemark stores holds a NUL: nothing is there
            return HttpResponse(
                json.dumps({"detail": "not found"}), status=404, content_type="application/json"
            )
        bad = [key for key, values in request.GET.lists() if _has_nul(key, *values)]
        if bad:
            if request.path.startswith("/api/"):
                name = bad[0].replace("\x00", "")
                return HttpResponse(
                    json.dumps({name or "query": ["must not contain NUL characters"]}),
                    status=400,
                    content_type="application/json",
                )
            cleaned = request.GET.copy()
            for key in bad:
                values = [value.replace("\x00", "") for value in cleaned.getlist(key)]
                del cleaned[key]
                if key.replace("\x00", ""):
                    cleaned.setlist(key.replace("\x00", ""), values)
            cleaned._mutable = False
            request.GET = cleaned
        return self.get_response(request)


def _has_nul(*texts: str) -> bool:
    return any("\x00" in text for text in texts)


# Pages run only Tidemark's own scripts and styles, served from its own static files: no inline
# <script> or <style>, no eval (htmx's trigger filters and indicator styles are off, see
# base.html), nothing from another origin. Inline style attributes stay allowed (the coverage
# strip's and histogram's widths, the admin's widgets, Swagger UI); they run no code.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "style-src-attr 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class ContentSecurityPolicyMiddleware:
    """Every response carries CONTENT_SECURITY_POLICY (a view that set its own keeps it), so a
    script that found its way into a page (a stored name shown unescaped, a hostile static file
    path) is not run by the browser."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response

"""API token authentication with a brake on guessing (issue 17, item 7).

Every request with a bad token counts one failure for its client address (the address django-axes
sees), in the cache for TIDEMARK_TOKEN_FAILURE_WINDOW
seconds. Past TIDEMARK_TOKEN_FAILURE_LIMIT failures the address gets 429 on any token until the
window has passed, even with a good token, so guessing cannot be told apart from a hit. Each
failure is logged and recorded as a django-axes access failure under the username "(api token)",
visible in the admin next to password failures (it does not count towards the password lockout);
a good token does not reset the count. The bearer token Prometheus sends to /metrics is counted
and throttled by the same count (recorded under "(metrics token)"), so guessing it is braked too
and alternating between the two kinds of token gains nothing.
"""

import logging

from axes.helpers import get_client_ip_address
from axes.models import AccessFailureLog
from django.conf import settings
from django.core.cache import cache
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

log = logging.getLogger("tidemark.security")

TOKEN_USERNAME = "(api token)"
# the /metrics bearer token (METRICS_TOKEN): its failures count with the API tokens'
METRICS_USERNAME = "(metrics token)"
_KINDS = {TOKEN_USERNAME: "API token", METRICS_USERNAME: "metrics bearer token"}


def _key(address: str) -> str:
    return f"tidemark:token-failures:{address}"


def token_failures(address: str) -> int:
    return cache.get(_key(address), 0)


def token_failures_reset(address: str) -> None:
    cache.delete(_key(address))


def guess_refused_check(django_request) -> str:
    """The request's client address; Throttled when that address is past the limit of bad
    credentials (API tokens and the /metrics bearer token share one count per address)."""
    address = get_client_ip_address(django_request) or "unknown"
    limit = settings.TIDEMARK_TOKEN_FAILURE_LIMIT
    if token_failures(address) >= limit:
        log.warning("API token refused: %s is past %d failures", address, limit)
        raise exceptions.Throttled(
            wait=settings.TIDEMARK_TOKEN_FAILURE_WINDOW,
            detail="Too many bad API tokens from this address.",
        )
    return address


def guess_failure_record(django_request, address: str, *, username: str = TOKEN_USERNAME) -> int:
    """Count one bad credential for `address`, log it and record it as an axes access failure
    under `username`; returns the address's count in the window."""
    limit = settings.TIDEMARK_TOKEN_FAILURE_LIMIT
    window = settings.TIDEMARK_TOKEN_FAILURE_WINDOW
    if cache.add(_key(address), 1, timeout=window):
        count = 1
    else:
        try:
            count = cache.incr(_key(address))
        except ValueError:  # expired between add and incr
            cache.set(_key(address), 1, timeout=window)
            count = 1
    log.warning("bad %s from %s (%d of %d)", _KINDS[username], address, count, limit)
    AccessFailureLog.objects.create(
        username=username,
        ip_address=address if address != "unknown" else None,
        user_agent=django_request.META.get("HTTP_USER_AGENT", "<unknown>")[:255],
        http_accept=django_request.META.get("HTTP_ACCEPT", "<unknown>")[:1025],
        path_info=django_request.path_info[:255],
        locked_out=count >= limit,
    )
    return count


class ThrottledTokenAuthentication(TokenAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header.split(" ", 1)[0].lower() == self.keyword.lower():
            return None  # no token offered: other authenticators (sessions) decide
        django_request = getattr(request, "_request", request)  # DRF's Request or Django's
        address = guess_refused_check(django_request)
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            guess_failure_record(django_request, address)
            raise

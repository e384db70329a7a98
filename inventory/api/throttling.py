"""Throttling for token clients (scripts, external processors); browser sessions are not throttled.

Scopes: `read` (GET), `processing` (acquire/heartbeat/succeed/fail, one batch or several: an
external processor's loop),
`write` (everything else). Rates come from REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], read at
request time so they can be changed per deployment and in tests.
"""

import math

from rest_framework.authtoken.models import Token
from rest_framework.permissions import SAFE_METHODS
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

PROCESSING_ACTIONS = {
    "acquire",
    "acquire_batches",
    "heartbeat",
    "succeed",
    "succeed_batches",
    "fail",
}


class TokenScopedRateThrottle(SimpleRateThrottle):
    def get_scope(self, request, view) -> str:
        if getattr(view, "action", None) in PROCESSING_ACTIONS:
            return "processing"
        return "read" if request.method in SAFE_METHODS else "write"

    def allow_request(self, request, view) -> bool:
        if not isinstance(request.auth, Token):
            return True
        self.scope = self.get_scope(request, view)
        self.rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_rate(self):
        # the rate is chosen per request in allow_request
        return None

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}

    def wait(self) -> int:
        """Whole seconds until this client's next call in the scope is let through (the 429's
        Retry-After), never less than 1: when the oldest call that still counts leaves the window.
        DRF's own answer is None (no Retry-After at all) once the history holds more calls than
        the budget, which happens when the rate was lowered or when calls from several web
        processes raced past the check together; and it is below 1 second, written as
        `Retry-After: 0`, when the budget is a few calls away from freeing up."""
        counted = self.history[: self.num_requests]  # newest first
        left = self.duration - (self.now - counted[-1]) if counted else self.duration
        return max(math.ceil(left), 1)

"""Throttling for token clients (scripts, external processors); browser sessions are not throttled.

Scopes: `read` (GET), `processing` (acquire/heartbeat/succeed/fail: an external processor's loop),
`write` (everything else). Rates come from REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], read at
request time so they can be changed per deployment and in tests.
"""

from rest_framework.authtoken.models import Token
from rest_framework.permissions import SAFE_METHODS
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

PROCESSING_ACTIONS = {"acquire", "heartbeat", "succeed", "fail"}


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

"""`POST /api/v1/auth/token/`: a user's API token for a username and password (the `tidemark
login` command; scripts may use it too). The token is the one the admin and `drf_create_token`
show: one per user, created on first use. Throttled per client address (`API_RATE_LOGIN`)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from inventory.api.serializers.strict import KnownFieldsOnly
from inventory.api.views import ERRORS


class LoginSerializer(KnownFieldsOnly, AuthTokenSerializer):
    """A username and a password, and nothing else: a key the login does not read (a one-time
    code a client expects to be checked) is a 400 naming it, as for every other call."""


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="send it as `Authorization: Token <token>`")
    username = serializers.CharField()


class LoginRateThrottle(AnonRateThrottle):
    """Password guesses per client address; no limit when the `login` rate is unset."""

    scope = "login"

    def allow_request(self, request, view) -> bool:
        self.rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_rate(self):
        # chosen per request in allow_request, so a deployment's (or a test's) setting applies
        return None


class TokenView(APIView):
    # a client with a stale token in its header can still log in
    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = [LoginRateThrottle]

    @extend_schema(
        summary="Get your API token with a username and password",
        description="Returns the user's token (created on first use). Wrong credentials or an "
        "inactive user: 400 naming `non_field_errors`. Throttled per client address "
        "(`API_RATE_LOGIN`, default 10/min): 429 with `Retry-After`.",
        request=LoginSerializer,
        responses={200: TokenSerializer, 400: ERRORS[400]},
        auth=[],
    )
    def post(self, request):
        serializer = LoginSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        user = serializer.validated_data["user"]
        token, _ = Token.objects.get_or_create(user=user)
        return Response({"token": token.key, "username": user.get_username()})

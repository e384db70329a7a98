"""The API throttle holds across the web server's processes: gunicorn runs two workers, and a token
client gets its rate once, not once per worker (the counters live in the shared Redis cache)."""

import urllib.error
import urllib.request

import pytest
from rest_framework.authtoken.models import Token

from tests.support.server_fixtures import TOKEN_READS_PER_MINUTE

pytestmark = pytest.mark.django_db(transaction=True)


def _get(url: str, token: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_token_client_gets_its_rate_once_across_gunicorn_workers(web_server, role_users):
    token = Token.objects.create(user=role_users["viewer"]).key
    codes = [
        _get(f"{web_server.url}/api/v1/jobs/", token) for _ in range(TOKEN_READS_PER_MINUTE + 10)
    ]
    assert codes.count(200) == TOKEN_READS_PER_MINUTE, codes
    assert codes[TOKEN_READS_PER_MINUTE:] == [429] * 10

"""Brute force (issue 17, item 7): logins lock out per user and per address (django-axes), bad API
tokens are throttled per address; both are logged and visible in the admin.

Each test uses addresses and usernames of its own, so no test locks another out.
"""

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token

from inventory.api.authentication import token_failures_reset

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _user(name: str, *, staff=False) -> User:
    return User.objects.create_user(username=name, password=PASSWORD, is_staff=staff)


def _login(client, url, username, password, address):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def _logged_in(client) -> bool:
    return "_auth_user_id" in client.session


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_repeated_wrong_passwords_lock_the_user_out_even_with_the_right_one(url, caplog):
    name = f"victim-{url.strip('/').replace('/', '-')}"
    _user(name, staff=True)
    client = Client()
    for index in range(settings.AXES_FAILURE_LIMIT):
        # each guess from another address: the lockout is per user too
        _login(client, url, name, "wrong", f"10.1.0.{index + 1}")
    response = _login(client, url, name, PASSWORD, "10.1.1.1")
    assert response.status_code == 429
    assert not _logged_in(client)
    assert AccessAttempt.objects.filter(username=name).exists()
    assert any("AXES" in record.getMessage() for record in caplog.records)


def test_repeated_failures_from_one_address_lock_that_address_out():
    victim = _user("address-victim")
    client = Client()
    for index in range(settings.AXES_FAILURE_LIMIT):
        _login(client, "/accounts/login/", f"nobody-{index}", "wrong", "10.2.0.1")
    assert (
        _login(client, "/accounts/login/", victim.username, PASSWORD, "10.2.0.1").status_code == 429
    )
    assert not _logged_in(client)
    # the same user from another address still gets in
    other = Client()
    response = _login(other, "/accounts/login/", victim.username, PASSWORD, "10.2.0.2")
    assert response.status_code == 302
    assert _logged_in(other)


def test_a_few_failures_do_not_lock_anyone_out():
    user = _user("clumsy")
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _login(client, "/accounts/login/", user.username, "wrong", "10.3.0.1")
    assert (
        _login(client, "/accounts/login/", user.username, PASSWORD, "10.3.0.1").status_code == 302
    )
    assert _logged_in(client)


@pytest.fixture
def token_addresses():
    addresses = ("10.4.0.1", "10.4.0.2")
    for address in addresses:
        token_failures_reset(address)
    yield addresses
    for address in addresses:
        token_failures_reset(address)


def test_bad_api_tokens_are_throttled_per_address_and_recorded(settings, caplog, token_addresses):
    settings.TIDEMARK_TOKEN_FAILURE_LIMIT = 5
    good = Token.objects.create(user=_user("scripted"))
    client = Client()
    for index in range(5):
        response = client.get(
            "/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token bad{index:036d}", REMOTE_ADDR="10.4.0.1"
        )
        assert response.status_code == 401
    # past the limit: 429 for any token from that address, the right one included
    for token in ("bad" + "0" * 37, good.key):
        response = client.get(
            "/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {token}", REMOTE_ADDR="10.4.0.1"
        )
        assert response.status_code == 429
    # another address is not affected
    response = client.get(
        "/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {good.key}", REMOTE_ADDR="10.4.0.2"
    )
    assert response.status_code != 429
    logged = AccessFailureLog.objects.filter(username="(api token)", ip_address="10.4.0.1")
    assert logged.count() == 5
    assert logged.filter(locked_out=True).count() == 1  # the failure that reached the limit
    # the password lockout is its own count: bad tokens do not lock the address out of logins
    assert not AccessAttempt.objects.filter(ip_address="10.4.0.1").exists()
    assert any("bad API token from 10.4.0.1" in r.getMessage() for r in caplog.records)


def test_lockouts_are_visible_in_the_admin():
    _user("admin-viewer-target")
    client = Client()
    for _ in range(3):
        _login(client, "/accounts/login/", "admin-viewer-target", "wrong", "10.5.0.1")
    admin = User.objects.create_superuser("root-axes", password=PASSWORD)
    client.force_login(admin)
    page = client.get("/admin/axes/accessattempt/")
    assert page.status_code == 200
    assert b"admin-viewer-target" in page.content
    assert client.get("/admin/axes/accessfailurelog/").status_code == 200

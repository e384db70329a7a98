"""POST /api/v1/auth/token/ (what `tidemark login` calls) and GET connectors/{name}/items/."""

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.cache import cache
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.support.api_support import make_inventory

URL = "/api/v1/auth/token/"


@pytest.mark.django_db
def test_it_returns_the_users_token_for_a_username_and_password():
    user = User.objects.create_user(username="ana", password="s3cret-enough")
    answer = APIClient().post(URL, {"username": "ana", "password": "s3cret-enough"}, format="json")
    assert answer.status_code == 200
    assert answer.json() == {"token": Token.objects.get(user=user).key, "username": "ana"}
    # the same token the next time (one per user, as the admin shows it)
    again = APIClient().post(URL, {"username": "ana", "password": "s3cret-enough"}, format="json")
    assert again.json()["token"] == answer.json()["token"]


@pytest.mark.django_db
def test_wrong_credentials_are_a_400_without_a_token():
    User.objects.create_user(username="ana", password="s3cret-enough")
    answer = APIClient().post(URL, {"username": "ana", "password": "nope"}, format="json")
    assert answer.status_code == 400
    assert "non_field_errors" in answer.json()
    assert not Token.objects.exists()
    missing = APIClient().post(URL, {"username": "ana"}, format="json")
    assert missing.status_code == 400 and "password" in missing.json()


@pytest.mark.django_db
def test_a_key_the_login_does_not_read_is_a_400_naming_it_and_gives_no_token():
    # e.g. a one-time code a client expects to be checked: it was ignored, and the token given
    User.objects.create_user(username="ana", password="s3cret-enough")
    body = {"username": "ana", "password": "s3cret-enough", "otp": "123456"}
    answer = APIClient().post(URL, body, format="json")
    assert answer.status_code == 400, answer.content
    assert list(answer.json()) == ["otp"], answer.json()
    assert not Token.objects.exists()


@pytest.mark.django_db
def test_password_guesses_are_throttled_per_client(settings):
    settings.REST_FRAMEWORK = {
        **django_settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "login": "2/min",
        },
    }
    cache.clear()
    client = APIClient(REMOTE_ADDR="10.9.8.7")
    codes = [
        client.post(URL, {"username": "x", "password": "y"}, format="json").status_code
        for _ in range(3)
    ]
    assert codes == [400, 400, 429]


@pytest.mark.django_db
def test_a_connectors_items_are_listed_newest_first_for_a_viewer(role_users):
    connector, _job = make_inventory(name="items-job", weights=[10, 20, 30])
    client = APIClient()
    client.force_authenticate(role_users["viewer"])
    answer = client.get(f"/api/v1/connectors/{connector.name}/items/?page_size=2")
    assert answer.status_code == 200
    page = answer.json()
    ids = sorted(connector.assets.values_list("id", flat=True), reverse=True)
    assert [row["id"] for row in page["results"]] == ids[:2]
    assert [row["weight"] for row in page["results"]] == [30, 20]
    assert page["next"]
    assert client.get("/api/v1/connectors/nope/items/").status_code == 404

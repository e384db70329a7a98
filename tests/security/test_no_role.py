"""A logged-in user in no role group reads nothing: not the API's schema or docs, not /metrics."""

import pytest
from django.test import Client

from tests.support.api_support import token_client

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", ["/api/schema/", "/api/docs/", "/metrics"])
def test_a_user_without_a_role_is_refused(role_users, url):
    browser = Client()
    browser.force_login(role_users["norole"])
    assert browser.get(url).status_code == 403
    assert token_client(role_users["norole"]).get(url).status_code != 200
    viewer = Client()
    viewer.force_login(role_users["viewer"])
    assert viewer.get(url).status_code == 200

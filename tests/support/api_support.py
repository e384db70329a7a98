"""Helpers for the API tests: clients per role, and a small inventory to act on."""

from django.conf import settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from inventory.services.assets import assets_register
from tests.support.factories import ConnectorFactory, make_job


def token_client(user) -> APIClient:
    """A client that authenticates like a script does: `Authorization: Token ...`."""
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def session_client(user) -> APIClient:
    """A client logged in with a session, like the browser (CSRF checks on)."""
    client = APIClient(enforce_csrf_checks=False)
    client.force_login(user)
    return client


def make_inventory(*, name="events", weights=(40, 40, 40, 40, 40, 40), **job_options):
    """A files connector with registered assets and one job over them."""
    landing = settings.DATA_DIR / "in"  # under the allowed roots (conftest)
    connector = ConnectorFactory(name=f"{name}-files", config={"path": str(landing)})
    assets_register(
        connector=connector,
        items=[(f"{landing}/{name}-{i:03d}.parquet", w, {}) for i, w in enumerate(weights)],
    )
    job = make_job(
        connector=connector,
        name=name,
        batch_weight=job_options.pop("batch_weight", 100),
        max_items=job_options.pop("max_items", 10),
        **job_options,
    )
    return connector, job

"""Property-based run of the whole API against its own OpenAPI schema (schemathesis).

The schema is fetched from /api/schema/ through the Django WSGI app, authenticated as an admin so
every operation is reachable. Each generated request is sent twice: as generated (mostly unknown
names and odd bodies), and with the path pointing at real objects. Checks: no 5xx, and every
documented response matches its schema.
"""

import pytest
import schemathesis

# imported at collection, before any test starts a thread: pytest rewrites schemathesis's modules
# (a pytest plugin) as they are imported, and on Python 3.11 an AST parse racing another thread's
# compile fails with "AST constructor recursion depth mismatch"; `from_wsgi` imports this lazily
import schemathesis.specs.openapi.schemas  # noqa: F401
from django.conf import settings as django_settings
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error, response_schema_conformance
from schemathesis.config import SchemathesisConfig

from controlplane.wsgi import application

CHECKS = [not_a_server_error, response_schema_conformance]
# Fuzzing only: the coverage phase enumerates every boundary case of every body field, which
# takes minutes on this API; max_examples bounds the fuzzing phase.
CONFIG = SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": False}}})


@pytest.fixture
def admin_headers(role_users, settings):
    # the run sends hundreds of requests in seconds; throttling is tested in tests/api/test_roles.py
    settings.REST_FRAMEWORK = {
        **django_settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"read": None, "write": None, "processing": None},
    }
    token, _ = Token.objects.get_or_create(user=role_users["admin"])
    return {"Authorization": f"Token {token.key}"}


@pytest.fixture
def real_objects(world):
    """The objects of `world` (tests/conftest.py) as the API names them."""
    return {
        "connector": world["connector"].name,
        "job": world["job"].name,
        "batches": [world["dead"].pk, world["running"].pk],
        "backfill": world["backfill"].pk,
    }


@pytest.fixture
def wsgi_app(db):
    """The project's WSGI app, minus the per-request connection cleanup: like Django's test
    client, keep the test's connection (and its transaction) open across requests."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield application
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def api_schema(wsgi_app, admin_headers):
    return schemathesis.openapi.from_wsgi(
        "/api/schema/?format=json", wsgi_app, headers=admin_headers, config=CONFIG
    )


schema = schemathesis.pytest.from_fixture("api_schema")


def _pointed_at_real_objects(case, real):
    params = dict(case.path_parameters or {})
    if "name" in params:
        params["name"] = real["connector"] if "/connectors/" in case.path else real["job"]
    if "id" in params:
        params["id"] = (
            str(real["backfill"]) if "/backfills/" in case.path else str(real["batches"][0])
        )
    return params


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.django_db
def test_the_api_keeps_to_its_schema(case, admin_headers, real_objects):
    _call_and_check(case, admin_headers)
    if case.path_parameters:
        case.path_parameters = _pointed_at_real_objects(case, real_objects)
        _call_and_check(case, admin_headers)


def _call_and_check(case, headers):
    # Each request in a savepoint, as autocommit would isolate it in production: a statement the
    # database refused fails here, at the request that sent it, not at every later one.
    with transaction.atomic():
        response = case.call(headers=headers)
    case.validate_response(response, checks=CHECKS, headers=headers)

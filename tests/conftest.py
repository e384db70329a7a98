"""Shared fixtures: real PostgreSQL (a test database of its own per pytest process), named users."""

import os

import pytest


@pytest.fixture(scope="session")
def django_db_modify_db_settings():
    """Give every pytest process its own test database, so parallel runs never collide."""
    from django.conf import settings

    suffix = os.environ.get("TIDEMARK_TEST_DB_SUFFIX") or str(os.getpid())
    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = f"test_tidemark_{suffix}"

"""Shared helpers and fixture plugins (loaded by tests/conftest.py); no tests here."""

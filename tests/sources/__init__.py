"""Connectors and discovery: each source kind, asset registration, start-after and orchestration."""

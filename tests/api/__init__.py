"""The REST API (inventory/api/), its roles, paging and schema, and the Python client over HTTP."""

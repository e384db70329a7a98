"""The REST API under /api/v1/: thin DRF views over inventory.services and inventory.selectors."""

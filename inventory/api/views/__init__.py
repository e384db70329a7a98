"""API views, one module per resource: validate with a serializer, call one action (or selector),
serialize the result.

Roles per action come from inventory/actions.py (`action_roles`, read by permissions.HasRole);
service errors become 400/404/409 in exceptions.exception_handler.
"""

from inventory.api.views.backfills import BackfillViewSet
from inventory.api.views.base import (
    ERRORS,
    ID_PATTERN,
    NAME_PATTERN,
    IdViewSet,
    NamedViewSet,
    validated,
    with_errors,
)
from inventory.api.views.batches import BatchViewSet
from inventory.api.views.connectors import ConnectorViewSet
from inventory.api.views.jobs import JobViewSet

__all__ = [
    "BackfillViewSet",
    "BatchViewSet",
    "ConnectorViewSet",
    "ERRORS",
    "ID_PATTERN",
    "IdViewSet",
    "JobViewSet",
    "NAME_PATTERN",
    "NamedViewSet",
    "validated",
    "with_errors",
]

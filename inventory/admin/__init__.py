"""The Django admin as the operations tool, one module per resource (Django autodiscovers this
package; importing the modules registers their model admins).

System-managed state (status, attempt, lease, span, watermark position/value, events) is read-only;
changes go through the actions inventory/actions.py declares, the same the API and the dashboard
call, as admin actions or forms that report with message_user. Operators use the actions
(pause/resume, retry, cancel); admins also edit connectors and jobs, skip dead batches and correct
watermarks (inventory/roles.py).
"""

from django.contrib import admin

from inventory.admin.backfills import BackfillAdmin, BackfillThrottleAdmin
from inventory.admin.base import ROLE_PERMISSION, ReadOnlyAdmin, RoleActionsMixin
from inventory.admin.batches import BatchAdmin, BatchAttemptAdmin
from inventory.admin.connectors import AssetAdmin, ConnectorAdmin
from inventory.admin.freshness import FreshnessThrottleAdmin, ThrottleDecisionAdmin
from inventory.admin.jobs import JobAdmin
from inventory.admin.restatements import RestatementAdmin
from inventory.admin.watermarks import WatermarkAdmin, WatermarkEventAdmin

# an empty field (no schedule, no watermark value yet, no finish time) reads as a dash, not "None"
admin.site.empty_value_display = "—"

__all__ = [
    "ROLE_PERMISSION",
    "AssetAdmin",
    "BackfillAdmin",
    "BackfillThrottleAdmin",
    "BatchAdmin",
    "BatchAttemptAdmin",
    "FreshnessThrottleAdmin",
    "ThrottleDecisionAdmin",
    "ConnectorAdmin",
    "JobAdmin",
    "ReadOnlyAdmin",
    "RestatementAdmin",
    "RoleActionsMixin",
    "WatermarkAdmin",
    "WatermarkEventAdmin",
]

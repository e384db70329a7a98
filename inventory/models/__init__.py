"""The inventory: connectors, assets, jobs, batches, watermarks, backfills, restatements, one module
per resource; every model and status list is importable from here (`from inventory.models import
Batch`).

The database holds the invariants (docs/design.md): named unique and check constraints, and an exclusion
constraint so that no two live batches of one job's lane cover the same item id.
"""

from inventory.models.backfills import Backfill, BackfillStatus, BackfillThrottle
from inventory.models.batches import (
    BACKFILL_DONE_STATUSES,
    COMMITTED_STATUSES,
    HOLDING_STATUSES,
    OPEN_STATUSES,
    OUTPUT_STATUSES,
    RETIRED_STATUSES,
    Batch,
    BatchAttempt,
    BatchKind,
    BatchStatus,
)
from inventory.models.connectors import (
    Asset,
    Connector,
    ConnectorEvent,
    ConnectorKind,
    ConnectorState,
    weight_unit,
)
from inventory.models.freshness import FreshnessThrottle, ThrottleDecision
from inventory.models.jobs import Job, RestatementPolicy, WatermarkType
from inventory.models.restatements import Restatement, RestatementCause, RestatementStatus
from inventory.models.retention import ForecastVerdict, RetentionForecast
from inventory.models.rollups import AttemptRollup, JobHourlyRates, MaintenanceRun
from inventory.models.watermarks import Watermark, WatermarkEvent, WatermarkSource

__all__ = [
    "Asset",
    "ForecastVerdict",
    "RetentionForecast",
    "AttemptRollup",
    "BACKFILL_DONE_STATUSES",
    "Backfill",
    "BackfillStatus",
    "BackfillThrottle",
    "Batch",
    "BatchAttempt",
    "BatchKind",
    "BatchStatus",
    "COMMITTED_STATUSES",
    "Connector",
    "ConnectorEvent",
    "ConnectorKind",
    "ConnectorState",
    "FreshnessThrottle",
    "HOLDING_STATUSES",
    "Job",
    "JobHourlyRates",
    "MaintenanceRun",
    "OPEN_STATUSES",
    "OUTPUT_STATUSES",
    "RETIRED_STATUSES",
    "Restatement",
    "RestatementCause",
    "RestatementPolicy",
    "RestatementStatus",
    "ThrottleDecision",
    "Watermark",
    "WatermarkEvent",
    "WatermarkSource",
    "WatermarkType",
    "weight_unit",
]

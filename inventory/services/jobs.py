"""Jobs: creation with validated budgets; each job gets its watermark in the same transaction."""

from django.db import transaction

from inventory.models import Connector, Job, WatermarkType
from inventory.services.errors import Conflict, InvalidInput
from inventory.services.watermarks import watermark_create


def validate_budget(*, batch_weight, max_items) -> None:
    if isinstance(batch_weight, bool) or not isinstance(batch_weight, int) or batch_weight <= 0:
        raise InvalidInput("batch_weight", f"must be a positive integer, got {batch_weight!r}")
    if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items <= 0:
        raise InvalidInput("max_items", f"must be a positive integer, got {max_items!r}")


@transaction.atomic
def job_create(
    *,
    name: str,
    connector: Connector,
    batch_weight: int,
    max_items: int = 1000,
    watermark_type: str = WatermarkType.INT,
    **options,
) -> Job:
    validate_budget(batch_weight=batch_weight, max_items=max_items)
    if watermark_type not in WatermarkType.values:
        raise InvalidInput(
            "watermark_type",
            f"unknown type {watermark_type!r}; use one of {', '.join(WatermarkType.values)}",
        )
    if Job.objects.filter(name=name).exists():
        raise Conflict(f"a job named {name!r} already exists")
    unknown = set(options) - {f.name for f in Job._meta.get_fields()}
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "is not a job setting")
    job = Job.objects.create(
        name=name,
        connector=connector,
        batch_weight=batch_weight,
        max_items=max_items,
        watermark_type=watermark_type,
        **options,
    )
    watermark_create(job=job)
    return job

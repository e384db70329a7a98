"""The shared backfill throttle: a weight-per-minute budget, global or per connector, that all
running backfills draw from. The rule is SQL's (tidemark_throttle_admits, in
inventory/sql/schema/acquire.sql): acquire applies it to every backfill batch it starts."""

from django.db import transaction

from inventory.models import Backfill, BackfillThrottle, Connector
from inventory.services.errors import InvalidInput
from inventory.sql import gateway


def throttle_set(*, connector: Connector | None, weight_per_minute: int | None) -> None:
    """Set (or with None, remove) the budget of one scope: a connector, or all of them."""
    if weight_per_minute is None:
        BackfillThrottle.objects.filter(connector=connector).delete()
        return
    if isinstance(weight_per_minute, bool) or not isinstance(weight_per_minute, int):
        raise InvalidInput("weight_per_minute", "must be a positive integer")
    if weight_per_minute <= 0:
        raise InvalidInput("weight_per_minute", "must be a positive integer")
    with transaction.atomic():
        BackfillThrottle.objects.update_or_create(
            connector=connector, defaults={"weight_per_minute": weight_per_minute}
        )


def throttle_usage() -> dict[int | None, int]:
    """Weight of backfill batches started in the last minute: per connector id, None = all."""
    used: dict[int | None, int] = dict(gateway.throttle_usage())
    used[None] = sum(used.values())
    return used


def throttle_admit(*, backfill: Backfill, candidates: list[tuple[int, int]]) -> list[int]:
    """Of (batch id, weight) candidates in order, the ids the budgets leave room for now
    (tidemark_throttle_admits: the rule acquire applies)."""
    admitted = gateway.throttle_admits(
        job_id=backfill.job_id, weights=[weight for _, weight in candidates]
    )
    return [pk for pk, _ in candidates[:admitted]]

"""The shared backfill throttle: a weight-per-minute budget, global or per connector, that all
running backfills draw from. Backfill pacing asks `throttle_admit` before it sends batches."""

from datetime import timedelta

from django.db import connection, transaction

from inventory.models import Backfill, BackfillThrottle, Connector
from inventory.services.errors import InvalidInput

WINDOW = timedelta(minutes=1)


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
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT j.connector_id, coalesce(sum(b.weight), 0) FROM inventory_batch AS b "
            "JOIN inventory_job AS j ON j.id = b.job_id "
            "WHERE b.backfill_id IS NOT NULL AND b.started_at >= statement_timestamp() - %s "
            "GROUP BY j.connector_id",
            [WINDOW],
        )
        used = {connector: int(weight) for connector, weight in cursor.fetchall()}
    used[None] = sum(used.values())
    return used


def throttle_admit(*, backfill: Backfill, candidates: list[tuple[int, int]]) -> list[int]:
    """Of (batch id, weight) candidates in order, the ids the budgets leave room for now.

    A batch heavier than a whole budget still runs when nothing else used that budget this
    minute, so no backfill waits forever."""
    connector_id = backfill.job.connector_id
    budgets = {
        throttle.connector_id: throttle.weight_per_minute
        for throttle in BackfillThrottle.objects.filter(connector_id__in=[connector_id])
        | BackfillThrottle.objects.filter(connector__isnull=True)
    }
    if not budgets:
        return [pk for pk, _ in candidates]
    used = throttle_usage()
    admitted = []
    spent = {scope: used.get(scope, 0) for scope in budgets}
    for pk, weight in candidates:
        if any(
            spent[scope] > 0 and spent[scope] + weight > budget for scope, budget in budgets.items()
        ):
            break
        admitted.append(pk)
        for scope in spent:
            spent[scope] += weight
    return admitted

"""The shared backfill throttle: a weight-per-minute budget, global or per connector, that all
running backfills draw from. The rule is SQL's (tidemark_throttle_admits, in
inventory/sql/schema/acquire.sql): acquire applies it to every backfill batch it starts."""

from django.db import connection, transaction

from inventory.models import Backfill, BackfillThrottle, Connector
from inventory.services.errors import InvalidInput


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
            "WHERE b.backfill_id IS NOT NULL "
            "AND b.started_at >= statement_timestamp() - tidemark_throttle_window() "
            "GROUP BY j.connector_id"
        )
        used = {connector: int(weight) for connector, weight in cursor.fetchall()}
    used[None] = sum(used.values())
    return used


def throttle_admit(*, backfill: Backfill, candidates: list[tuple[int, int]]) -> list[int]:
    """Of (batch id, weight) candidates in order, the ids the budgets leave room for now
    (tidemark_throttle_admits: the rule acquire applies)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tidemark_throttle_admits(connector_id, %s::bigint[]) FROM inventory_job "
            "WHERE id = %s",
            [[weight for _, weight in candidates], backfill.job_id],
        )
        (admitted,) = cursor.fetchone()
    return [pk for pk, _ in candidates[:admitted]]

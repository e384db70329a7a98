"""Batch planning in the database: continuous id ranges bounded by a weight budget and an item cap.

Planning runs inside PostgreSQL (tidemark_plan_items). A connector's assets, the items of most
jobs, are planned by index searches on their prefix sums (tidemark_plan_assets): a batch's end
under the weight budget and the item cap costs a few probes, whatever the batch's size or the
backlog. Any other item query (a local meta table read in place, a job_output's commits) is walked
in id order by tidemark_plan_batches, reading as many rows as the batches it cuts. Planners of one
job serialize on the job's row lock; the exclusion constraint on Batch.span is the backstop.
"""

from dataclasses import dataclass

from django.db import DatabaseError, DataError, connection, transaction

from inventory.services.errors import InvalidInput
from inventory.sources.base import ItemSource
from inventory.sql import query

# undefined_table, undefined_column: an item source that no longer matches its config
MISSING_SOURCE_CODES = ("42P01", "42703")
# ... or that refuses to be read (tidemark_refuse, inventory/sql/schema/planning.sql)
SOURCE_UNREADABLE_CODES = (*MISSING_SOURCE_CODES, "TM422")


@dataclass(frozen=True)
class PlannedRange:
    """The half-open id range [lower, upper) of one batch and what it holds."""

    lower: int
    upper: int
    item_count: int
    weight: int


def plan_step(
    *, source: ItemSource, lower: int, upper: int | None, budget: int, max_items: int
) -> PlannedRange | None:
    """The next batch starting at `lower` (and before `upper`), or None when there is no item.

    The range starts at `lower`, not at its first item, so consecutive batches cover the id space
    without gaps; when the stretch before `upper` is exhausted the range reaches `upper`.
    """
    plan = _plan(source=source, first=lower, end=upper, budget=budget, max_items=max_items, limit=1)
    return plan[0] if plan else None


def plan_closed_range(
    *, source: ItemSource, first: int, last: int, budget: int, max_items: int
) -> list[PlannedRange]:
    """Plan [first, last] completely (a backfill or its preview): exact, no batch over budget."""
    if last < first:
        raise InvalidInput("range_end", f"must not be before range_start ({last} < {first})")
    return _plan(source=source, first=first, end=last + 1, budget=budget, max_items=max_items)


# the SQLSTATE tidemark_plan_batches raises for a negative or missing weight
BAD_WEIGHT_CODE = "22023"


def _plan(
    *,
    source: ItemSource,
    first: int,
    end: int | None,
    budget: int,
    max_items: int,
    limit: int | None = None,
) -> list[PlannedRange]:
    """Run tidemark_plan_items over the source's items in id order."""
    try:
        # a savepoint: a bad weight must not leave the caller's transaction aborted
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                query("plan_batches"),
                [
                    source.prefix_sums_of,
                    source.planning_query(),
                    first,
                    end,
                    budget,
                    max_items,
                    limit,
                ],
            )
            rows = cursor.fetchall()
    except DataError as exc:
        message = str(exc).strip().splitlines()[0]
        if getattr(exc.__cause__, "pgcode", None) == BAD_WEIGHT_CODE:
            raise InvalidInput("weight", message) from None
        raise InvalidInput(source.config_field, message) from None
    except DatabaseError as exc:
        # the meta table or one of its columns changed after the connector was created, or the
        # source refused to be read (tidemark_refuse: a job_output's expired commit)
        if getattr(exc.__cause__, "pgcode", None) not in SOURCE_UNREADABLE_CODES:
            raise
        raise InvalidInput(source.config_field, str(exc).strip().splitlines()[0]) from None
    return [PlannedRange(*row) for row in rows]


def incremental_start(*, job_id: int, source: ItemSource | None = None) -> tuple[int, int | None]:
    """Where the next incremental batch starts, and the bound it must stay below (None: open).

    Normally after the last batch that holds its range; if a cancelled batch left a hole above the
    watermark, the hole is filled first so the watermark can move over it, and a hole with no item
    left is covered by a skipped batch (tidemark_incremental_next, migration 0008). The caller
    holds the job's row lock.
    """
    if source is None:
        from inventory.models import Job
        from inventory.sources.registry import source_for_connector

        source = source_for_connector(
            Job.objects.select_related("connector").get(pk=job_id).connector
        )
    with connection.cursor() as cursor:
        cursor.execute(
            query("incremental_next"),
            [job_id, source.planning_query()],
        )
        return cursor.fetchone()

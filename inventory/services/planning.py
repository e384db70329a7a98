"""Batch planning in the database: continuous id ranges bounded by a weight budget and an item cap.

Planning runs inside PostgreSQL (tidemark_plan_items). A connector's assets, the items of most
jobs, are planned by index searches on their prefix sums (tidemark_plan_assets): a batch's end
under the weight budget and the item cap costs a few probes, whatever the batch's size or the
backlog. Any other item query (a local meta table read in place, a job_output's commits) is walked
in id order by tidemark_plan_batches, reading as many rows as the batches it cuts. Planners of one
job serialize on the job's row lock; the exclusion constraint on Batch.span is the backstop.
"""

from inventory.services.errors import InvalidInput
from inventory.sources.base import ItemSource
from inventory.sql import gateway
from inventory.sql.gateway import PlannedRange

__all__ = ["PlannedRange", "incremental_start", "plan_closed_range", "plan_step"]


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


def _plan(
    *,
    source: ItemSource,
    first: int,
    end: int | None,
    budget: int,
    max_items: int,
    limit: int | None = None,
) -> list[PlannedRange]:
    """Run tidemark_plan_items over the source's items in id order. A bad weight is InvalidInput
    of `weight`; a meta table or column changed after the connector was created, or a source
    refusing to be read (tidemark_refuse: a job_output's expired commit), of the source's field."""
    return gateway.plan_items(
        connector_id=source.prefix_sums_of,
        items=source.planning_query(),
        first=first,
        end=end,
        budget=budget,
        max_items=max_items,
        limit=limit,
        source_field=source.config_field,
    )


def incremental_start(*, job_id: int, source: ItemSource | None = None) -> tuple[int, int | None]:
    """Where the next incremental batch starts, and the bound it must stay below (None: open).

    Normally after the last batch that holds its range; if a cancelled batch left a hole above the
    watermark, the hole is filled first so the watermark can move over it, and a hole with no item
    left is covered by a skipped batch (tidemark_incremental_next, inventory/sql/schema/planning.sql). The caller
    holds the job's row lock.
    """
    if source is None:
        from inventory.models import Job
        from inventory.sources.registry import source_for_connector

        source = source_for_connector(
            Job.objects.select_related("connector").get(pk=job_id).connector
        )
    start = gateway.incremental_next(job_id=job_id, items=source.planning_query())
    return start.lower, start.upper

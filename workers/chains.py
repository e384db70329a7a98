"""Chains flow without waiting for beat: when a batch commits, the jobs reading its job's commits
(job_output connectors) are nudged at once."""

import logging

from inventory.models import ConnectorState, Job
from inventory.services import dispatch
from inventory.sources.job_output import downstream_jobs

log = logging.getLogger(__name__)


def downstream_nudge(*, job: Job) -> list[str]:
    """Nudge the jobs whose connector reads `job` (one of its batches just committed), so a chain
    moves on at once instead of at the next beat step; their workers plan through acquire, which
    skips paused jobs and inactive connectors. A failure only leaves them to beat's sweep.
    Returns the jobs nudged."""
    nudged = []
    try:
        followers = list(
            downstream_jobs(job)
            .filter(paused=False, connector__state=ConnectorState.ACTIVE)
            .order_by("pk")
            .values_list("pk", "name")
        )
        for pk, name in followers:
            dispatch.nudge(pk)
            nudged.append(name)
    except Exception:
        log.exception("job %s: nudging the jobs that read its commits failed", job.name)
    return nudged

"""Every action that changes something, declared once: the role it needs and the service that does it.

The API's permission check (each viewset's `action_roles`, read by api/permissions.HasRole), the
admin's actions and the dashboard's buttons all take the role from here, so an action cannot need
one role in the API and another on a page. The fronts (API views, dashboard views, admin) take an
action through `run(key, user, **arguments)`, which checks the role once more and calls the
declared service with the declaration's `fixed` arguments (job.pause: paused=True): what the table
says is what runs (tests/repo/test_actions_dispatch.py). Each action holds its service function itself
(go-to-definition leads to it); the services do not import this module (they do not depend on who
may call them).

`api` places an action in the REST API: (viewset, DRF action), where a DRF action shared by several
methods is keyed "action:METHOD" (permissions.HasRole's convention).
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.core.exceptions import PermissionDenied

from inventory.roles import ADMIN, OPERATOR, VIEWER, has_role
from inventory.services import (
    announcements,
    backfills,
    connectors,
    corrections,
    discovery,
    freshness,
    gaps,
    jobs,
    lifecycle,
    restatement_records,
    scheduling,
    throttle,
)


@dataclass(frozen=True)
class Action:
    key: str  # "<target>.<verb>": what it acts on, and the verb used in URLs and forms
    role: str
    service: Callable  # the service function
    label: str  # what a button or an admin action says
    api: tuple[str, str] | None = None
    needs_reason: bool = False
    # arguments the declaration fixes, passed to the service with the caller's (pause: paused=True)
    fixed: tuple[tuple[str, object], ...] = ()

    @property
    def target(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def verb(self) -> str:
        return self.key.split(".", 1)[1]

    def allowed(self, user) -> bool:
        return has_role(user, self.role)

    def run(self, user, /, **arguments):
        """The service with the fixed and the given arguments, if `user` has the role (else
        PermissionDenied: the fronts check first and answer in their own way, this is the floor)."""
        if not self.allowed(user):
            raise PermissionDenied(f"this needs the {self.role} role")
        return self.service(**dict(self.fixed), **arguments)


ACTIONS: dict[str, Action] = {
    action.key: action
    for action in (
        # operators steer the work
        Action("connector.pause", OPERATOR, connectors.connector_pause, "Pause",
               api=("connectors", "pause")),
        Action("connector.resume", OPERATOR, connectors.connector_resume, "Resume",
               api=("connectors", "resume")),
        Action("connector.discover", OPERATOR, discovery.connector_discover_now,
               "Discover now", api=("connectors", "discover")),
        Action("job.run", OPERATOR, scheduling.job_run_now, "Run now",
               api=("jobs", "run")),
        Action("job.pause", OPERATOR, jobs.job_set_paused, "Pause", api=("jobs", "pause"),
               fixed=(("paused", True),)),
        Action("job.resume", OPERATOR, jobs.job_set_paused, "Resume",
               api=("jobs", "resume"), fixed=(("paused", False),)),
        Action("job.backfill", OPERATOR, backfills.backfill_create, "Schedule a backfill",
               api=("backfills", "create")),
        # POST /api/v1/jobs/{name}/gaps/backfill/ (api/health.py): a backfill per hole of a job
        Action("job.backfill_holes", OPERATOR, gaps.holes_backfill, "Backfill the holes"),
        Action("backfill.pause", OPERATOR, backfills.backfill_set_status, "Pause",
               api=("backfills", "pause"), fixed=(("status", "paused"),)),
        Action("backfill.resume", OPERATOR, backfills.backfill_set_status, "Resume",
               api=("backfills", "resume"), fixed=(("status", "running"),)),
        Action("backfill.cancel", OPERATOR, backfills.backfill_set_status, "Cancel",
               api=("backfills", "cancel"), fixed=(("status", "cancelled"),)),
        # POST /api/v1/jobs/{name}/restatements/{id}/apply/ and dismiss/ (api/restatements.py)
        Action("restatement.apply", OPERATOR, restatement_records.restatement_apply,
               "Apply the replay"),
        Action("restatement.dismiss", OPERATOR, restatement_records.restatement_dismiss,
               "Dismiss", needs_reason=True),
        Action("throttle.set", OPERATOR, throttle.throttle_set,
               "Set the shared backfill throttle"),  # PUT /api/v1/backfill-throttle/
        # PUT /api/v1/backfill-throttle/freshness/ (api/freshness.py), the backfills page, admin
        Action("throttle.pin", OPERATOR, freshness.throttle_pin,
               "Pin the backfills' rate"),
        Action("throttle.configure", ADMIN, freshness.throttle_control_configure,
               "Change the freshness controller"),
        Action("batch.retry", OPERATOR, lifecycle.batch_retry, "Retry",
               api=("batches", "retry")),
        Action("batch.cancel", OPERATOR, lifecycle.batch_cancel, "Cancel",
               api=("batches", "cancel")),
        # admins change history and configuration
        Action("batch.skip", ADMIN, lifecycle.batch_skip, "Skip", api=("batches", "skip"),
               needs_reason=True),
        Action("watermark.correct", ADMIN, corrections.watermark_correct,
               "Correct the watermark", api=("jobs", "watermark:POST"), needs_reason=True),
        Action("connector.reset", ADMIN, connectors.connector_reset, "Reset",
               api=("connectors", "reset"), needs_reason=True),
        Action("connector.create", ADMIN, connectors.connector_create, "Create",
               api=("connectors", "create")),
        Action("connector.update", ADMIN, connectors.connector_update, "Change",
               api=("connectors", "partial_update")),
        Action("connector.delete", ADMIN, connectors.connector_delete, "Delete",
               api=("connectors", "destroy")),
        Action("job.create", ADMIN, jobs.job_create, "Create", api=("jobs", "create")),
        Action("job.update", ADMIN, jobs.job_update, "Change",
               api=("jobs", "partial_update")),
        Action("job.delete", ADMIN, jobs.job_delete, "Delete", api=("jobs", "destroy")),
        # processing applications (acquire/succeed, producers announcing files)
        Action("connector.announce", OPERATOR, announcements.assets_announce, "Announce assets",
               api=("connectors", "assets")),
        Action("job.acquire", OPERATOR, lifecycle.batch_acquire, "Acquire",
               api=("jobs", "acquire")),
        Action("job.acquire_batches", OPERATOR, lifecycle.batches_acquire, "Acquire batches",
               api=("jobs", "acquire_batches")),
        Action("job.succeed_batches", OPERATOR, lifecycle.batches_succeed, "Succeed batches",
               api=("jobs", "succeed_batches")),
        Action("batch.heartbeat", OPERATOR, lifecycle.batch_heartbeat, "Heartbeat",
               api=("batches", "heartbeat")),
        Action("batch.succeed", OPERATOR, lifecycle.batch_succeed, "Succeed",
               api=("batches", "succeed")),
        Action("batch.fail", OPERATOR, lifecycle.batch_fail, "Fail",
               api=("batches", "fail")),
        # a read with a body (POST): planning a backfill without creating it
        Action("job.backfill_preview", VIEWER, backfills.backfill_preview,
               "Preview a backfill", api=("backfills", "preview")),
    )
}  # fmt: skip


def action(key: str) -> Action:
    return ACTIONS[key]


def run(key: str, user, /, **arguments):
    """Take action `key` as `user`: the declared service, with the declared fixed arguments and
    `arguments` (KeyError for an undeclared action; PermissionDenied without its role)."""
    return ACTIONS[key].run(user, **arguments)


def role_of(key: str) -> str:
    """The role `key` needs (KeyError for an undeclared action: a typo fails at import time)."""
    return ACTIONS[key].role


def allowed(user, key: str) -> bool:
    return ACTIONS[key].allowed(user)


def api_roles(viewset: str) -> dict[str, str]:
    """`action_roles` of one API viewset: DRF action (or "action:METHOD") -> role."""
    return {a.api[1]: a.role for a in ACTIONS.values() if a.api and a.api[0] == viewset}


def allowed_keys(user) -> set[str]:
    """The actions `user` may take (pages show only those buttons)."""
    return {key for key, a in ACTIONS.items() if a.allowed(user)}

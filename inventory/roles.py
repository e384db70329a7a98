"""Roles: three Django groups, each including the one before it; superusers are admins.

viewer   reads everything.
operator also pauses/resumes connectors, runs jobs, processes batches from outside (acquire,
         heartbeat, succeed, fail), retries and cancels batches, schedules and steers backfills.
admin    also creates, changes and deletes connectors and jobs, corrects watermarks and skips dead
         batches.

The groups (and their admin-site model permissions) are created by migration 0001_baseline and kept
current after every `migrate` (role_groups_ensure, inventory/apps.py).
"""

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"

ROLES = (VIEWER, OPERATOR, ADMIN)  # ascending: each role includes the ones before it

# Admin-site model permissions per role (the API checks roles, not these). Operators act in the
# admin through actions that check the role (pause, retry, cancel); only admins edit objects.
_MODELS = (
    "connector",
    "asset",
    "job",
    "batch",
    "batchattempt",
    "backfill",
    "watermark",
    "watermarkevent",
    "restatement",
)
_VIEW = {f"view_{model}" for model in _MODELS}
ROLE_PERMISSIONS = {
    VIEWER: _VIEW,
    OPERATOR: _VIEW,
    ADMIN: _VIEW
    | {
        f"{action}_{model}"
        for model in ("connector", "job")
        for action in ("add", "change", "delete")
    }
    | {"change_watermark"},
}


def user_role(user) -> str | None:
    """The highest role of `user`, or None for anonymous users and users in no role group."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return ADMIN
    cached = getattr(user, "_tidemark_role", False)
    if cached is not False:
        return cached
    names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
    role = next((r for r in reversed(ROLES) if r in names), None)
    user._tidemark_role = role
    return role


def has_role(user, role: str) -> bool:
    """Whether `user` holds `role` or a higher one."""
    held = user_role(user)
    return held is not None and ROLES.index(held) >= ROLES.index(role)


def actor_name(user) -> str:
    """How a user is recorded in audit fields (watermark events, skip reasons, backfills)."""
    return user.get_username() if user is not None and user.is_authenticated else ""


def role_groups_ensure() -> None:
    """Create the role groups with their admin-site permissions if missing (idempotent).

    Migration 0001_baseline created them; every `migrate` runs this after it (models added later get
    their permissions), and tests run it after a flush.
    """
    from django.contrib.auth.models import Group, Permission

    for role, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(
            Permission.objects.filter(content_type__app_label="inventory", codename__in=codenames)
        )

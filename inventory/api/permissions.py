"""Role checks for the API: each view names the role its actions need (inventory.roles)."""

from rest_framework.exceptions import ValidationError
from rest_framework.permissions import SAFE_METHODS, BasePermission

from inventory.roles import ADMIN, VIEWER, has_role


class HasRole(BasePermission):
    """Reads need `viewer`; a write needs the role the view declares in `action_roles`, keyed by
    "action:METHOD" or "action" (default: admin, so a new write is closed until someone decides)."""

    message = "your role does not allow this"

    def has_permission(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        action = getattr(view, "action", None)
        roles = getattr(view, "action_roles", {})
        keyed = f"{action}:{request.method}"
        if keyed in roles:
            required = roles[keyed]
        elif action in roles:
            required = roles[action]
        elif request.method in SAFE_METHODS:
            required = VIEWER
        else:
            required = ADMIN
        if not has_role(request.user, required):
            self.message = f"this needs the {required} role"
            return False
        return True


class DryRunWhereOffered(BasePermission):
    """`?dry_run=` on a write that has no dry run is a 400, never that write done for real (a
    `DELETE ...?dry_run=true` would delete). A view offers dry runs for the actions it lists in
    `dry_run_actions` (views/base.kept_unless). After HasRole: who may not write gets 401/403."""

    def has_permission(self, request, view) -> bool:
        if "dry_run" not in request.query_params or request.method in SAFE_METHODS:
            return True
        offered = getattr(view, "dry_run_actions", ())
        if getattr(view, "action", None) in offered:
            return True
        raise ValidationError(
            {
                "dry_run": [
                    "this call has no dry run (it would be done for real); it is offered "
                    "on creating, changing and deleting connectors and jobs and on a "
                    "connector reset"
                ]
            }
        )

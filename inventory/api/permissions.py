"""Role checks for the API: each view names the role its actions need (inventory.roles)."""

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

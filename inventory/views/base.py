"""What every dashboard page shares: the role a page needs, the role an action needs, the page's
context, an action's call and its message."""

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

from inventory.actions import ACTIONS, allowed, allowed_keys, role_of
from inventory.roles import ADMIN, has_role
from inventory.services.errors import TidemarkError


def role_required(role):
    def decorate(view):
        @wraps(view)
        @login_required
        def wrapper(request, *args, **kwargs):
            if not has_role(request.user, role):
                raise PermissionDenied(f"this needs the {role} role")
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def require_allowed(request, key: str) -> None:
    """Refuse unless the user holds the role inventory/actions.py declares for `key`."""
    if key not in ACTIONS:
        raise PermissionDenied(f"unknown action {key!r}")
    if not allowed(request.user, key):
        raise PermissionDenied(f"{key} needs the {role_of(key)} role")


def page_context(request):
    return {
        # every action button asks this ("batch.skip" in allowed_actions, with
        # data-action="batch.skip" on its form): the roles of inventory/actions.py, as require_allowed
        "allowed_actions": allowed_keys(request.user),
        "can_admin": has_role(request.user, ADMIN),  # the header's link to the admin site
    }


def is_htmx(request) -> bool:
    return request.headers.get("HX-Request") == "true"


def positive_int(value, default: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if number > 0 else default


def act(request, call, done_message):
    """Run a service call; its error or `done_message` (text, or a function of the result)."""
    try:
        result = call()
    except TidemarkError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done_message(result) if callable(done_message) else done_message)


def form_error(form, exc):
    field = getattr(exc, "field", None)
    if field == "range_start" and form.cleaned_data.get("by") == "time":
        field = "time_start"  # no item in a time range: shown beside the time inputs
    form.add_error(field if field in form.fields else None, getattr(exc, "message", str(exc)))

"""What every model admin shares: read-only records, actions needing the role inventory/actions.py
declares, service errors on forms."""

from django.contrib import admin, messages

from inventory.actions import role_of
from inventory.roles import ADMIN, OPERATOR, has_role
from inventory.services.errors import InvalidInput, TidemarkError


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records the system writes: viewable, never added, edited or deleted by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# an admin action's permission by the role it needs: has_<permission>_permission below
ROLE_PERMISSION = {OPERATOR: "operate", ADMIN: "administer"}


def service_action(key: str, description: str):
    """An admin action needing the role inventory/actions.py declares for `key`."""
    return admin.action(description=description, permissions=[ROLE_PERMISSION[role_of(key)]])


class RoleActionsMixin:
    """`allowed_permissions = ("operate",)` / `("administer",)` on an action checks the role."""

    def get_form(self, request, obj=None, **kwargs):
        """The form class of this request, knowing its user (forms that save take an action as
        the user: inventory/actions.run)."""
        form = super().get_form(request, obj, **kwargs)
        form.user = request.user
        return form

    def has_operate_permission(self, request):
        return has_role(request.user, OPERATOR)

    def has_administer_permission(self, request):
        return has_role(request.user, ADMIN)

    def run_service(self, request, queryset, label: str, call) -> None:
        """Call `call(obj)` for each selected object; one message for the successes, one per error."""
        done = []
        for obj in queryset:
            try:
                call(obj)
            except TidemarkError as exc:
                self.message_user(request, f"{obj}: {exc}", messages.ERROR)
            else:
                done.append(str(obj))
        if done:
            self.message_user(request, f"{label}: {', '.join(done)}", messages.SUCCESS)


def services_form_error(form, exc: TidemarkError) -> None:
    """Show a service error on the form field it names, or on the form."""
    field = exc.field if isinstance(exc, InvalidInput) else None
    if field not in form.fields:
        field = None
    form.add_error(field, exc.message if isinstance(exc, InvalidInput) else str(exc))


def own_delete_permission_only(model_admin, objs, request):
    """get_deleted_objects, needing delete permission on the model itself only: the records that
    go with it (assets, batches, events) are system-managed and read-only, and the delete service
    removes them."""
    deleted, counts, perms_needed, protected = admin.ModelAdmin.get_deleted_objects(
        model_admin, objs, request
    )
    own = {model_admin.model._meta.verbose_name}
    return deleted, counts, perms_needed & own, protected

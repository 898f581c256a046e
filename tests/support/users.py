"""Users with exactly the workqueue permissions a test names (the roles of the permission
matrix: anonymous, no permission, viewer, operator, superuser)."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User

VIEWER = ("view_job",)
OPERATOR = (
    "view_job", "view_job_payload", "view_job_traceback", "cancel_job", "retry_job",
    "hold_job", "purge_job", "manage_queue", "manage_schedule",
)  # fmt: skip


def user_with(*codenames: str, username: str = "ops", **fields: object) -> User:
    """A new user holding the workqueue permissions ``codenames`` (password ``"x"``)."""
    user = User.objects.create_user(username=username, password="x", **fields)
    ours = Permission.objects.filter(content_type__app_label="django_workqueue")
    user.user_permissions.set(ours.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)  # a fresh instance: permissions are cached per instance

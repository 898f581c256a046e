"""The one permission model: each operator action needs one permission on ``Job``; active
superusers have them all; a refusal names the permission to grant."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, Permission, User
from django.core.exceptions import PermissionDenied

from django_workqueue import permissions
from tests.support.users import user_with

pytestmark = pytest.mark.django_db

ACTIONS = sorted(permissions.ACTIONS)


def test_every_codename_the_actions_need_exists_after_migrate():
    jobs = Permission.objects.filter(
        content_type__app_label="django_workqueue", content_type__model="job"
    )
    codenames = set(jobs.values_list("codename", flat=True))

    assert set(permissions.ACTIONS.values()) <= codenames


@pytest.mark.parametrize(
    ("action", "codename"),
    [
        ("view", "view_job"), ("view_payload", "view_job_payload"),
        ("view_traceback", "view_job_traceback"), ("cancel", "cancel_job"),
        ("retry", "retry_job"), ("redrive", "retry_job"), ("hold", "hold_job"),
        ("release", "hold_job"), ("purge", "purge_job"), ("pause", "manage_queue"),
        ("resume", "manage_queue"), ("run_schedule", "manage_schedule"),
        ("manage_schedule", "manage_schedule"), ("enqueue", "add_job"),
    ],
)  # fmt: skip
def test_an_action_is_allowed_by_its_permission_and_by_no_other(action, codename):
    others = set(permissions.ACTIONS.values()) - {codename}

    assert permissions.allowed(user_with(codename), action)
    User.objects.all().delete()
    assert not permissions.allowed(user_with(*others), action)


@pytest.mark.parametrize("action", ACTIONS)
def test_an_active_superuser_may_do_everything(action):
    superuser = User.objects.create_superuser(username="root", password="x")

    assert permissions.allowed(superuser, action)
    permissions.require(superuser, action)


@pytest.mark.parametrize("action", ACTIONS)
def test_anonymous_users_and_inactive_superusers_may_do_nothing(action):
    inactive = User.objects.create_superuser(username="gone", password="x", is_active=False)

    assert not permissions.allowed(AnonymousUser(), action)
    assert not permissions.allowed(inactive, action)
    assert not permissions.allowed(None, action)


def test_a_refusal_names_the_user_the_action_and_the_permission_to_grant():
    viewer = user_with("view_job")

    with pytest.raises(PermissionDenied) as refused:
        permissions.require(viewer, "redrive")

    assert str(refused.value) == (
        "ops may not redrive: it needs the permission django_workqueue.retry_job"
    )
    with pytest.raises(PermissionDenied, match="anonymous may not view payload"):
        permissions.require(AnonymousUser(), "view_payload")


def test_an_unknown_action_is_an_error_listing_the_actions():
    with pytest.raises(ValueError, match="unknown workqueue action 'delete'; the actions are: "):
        permissions.allowed(AnonymousUser(), "delete")

"""Clients of the HTTP API as each role of the permission matrix (anonymous, no permission,
viewer, operator, superuser), authenticated with HTTP basic."""

from __future__ import annotations

import base64

from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tests.support.users import OPERATOR, VIEWER, user_with

API = "/api/workqueue/"
ROLES = ("anonymous", "nobody", "viewer", "operator", "superuser")


def basic(username: str, password: str = "x") -> str:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return f"Basic {token}"


def user_for(role: str) -> User | None:
    """The user of ``role`` (made on first use; None for anonymous)."""
    if role == "anonymous":
        return None
    existing = User.objects.filter(username=role).first()
    if existing is not None:
        return existing
    if role == "superuser":
        return User.objects.create_superuser(username="superuser", password="x")
    codenames = {"nobody": (), "viewer": VIEWER, "operator": OPERATOR}[role]
    return user_with(*codenames, username=role)


def client_as(role: str) -> APIClient:
    """An API client of ``role``, sending HTTP basic credentials with every request."""
    client = APIClient()
    user = user_for(role)
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=basic(user.get_username()))
    return client

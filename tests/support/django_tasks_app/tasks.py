"""A Django 6 project's tasks, unchanged by the switch to the WorkqueueBackend."""

from __future__ import annotations

from django.tasks import task


@task
def multiply(a: int, b: int) -> int:
    return a * b


@task
def refuse(reason: str) -> None:
    raise ValueError(reason)

"""Tasks defined with Django's own ``@task`` (Django 6+), run by the WorkqueueBackend."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from django.tasks import task

from django_workqueue.exceptions import Discard


@task
def add(a, b):
    return a + b


@task(queue_name="mail", priority=7)
def send(address, subject="hello"):
    return f"{subject} -> {address}"


@task(takes_context=True)
def attempt_of(context, value):
    return {"attempt": context.attempt, "id": context.task_result.id, "value": value}


@task
def boom(message):
    raise ValueError(message)


@task
def give_up(reason):
    raise Discard(reason)


@task
def fails_once_by_default(message):
    """No max_attempts anywhere: the backend's default, one body attempt."""
    raise ValueError(message)


@task
async def async_double(value):
    await asyncio.sleep(0)
    return value * 2


@task(takes_context=True)
def die_once(context, marker):
    """The first attempt writes its pid to ``marker`` and waits to be killed; the next
    succeeds (lease_seconds=2 in the test settings' TASK_OPTIONS)."""
    if context.attempt == 1:
        Path(marker).write_text(str(os.getpid()))
        time.sleep(60)
    return context.attempt

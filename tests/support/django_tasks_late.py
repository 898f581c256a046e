"""A ``django.tasks`` task in a module that only a test imports (after start-up): a worker
would not know it, and its first enqueue says so."""

from __future__ import annotations

from django.tasks import task


@task
def late_add(a: int, b: int) -> int:
    return a + b

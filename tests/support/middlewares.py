"""Attempt middlewares and tasks for tests/integration/test_middleware.py."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from django_workqueue import Snooze, task

EVENTS: list[str] = []
"""What the middlewares and the tasks below did, in order (cleared by each test)."""
BUILT: list[str] = []
"""Each factory call, by name: factories run once per process, not per job."""
_lock = threading.Lock()

logger = logging.getLogger("tests.support.jobs")


def note(event: str) -> None:
    with _lock:
        EVENTS.append(event)


def _tracing(name: str) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    def make(next_call: Callable[[Any], Any]) -> Callable[[Any], Any]:
        BUILT.append(name)

        def call(context: Any) -> Any:
            note(f"{name} in #{context.attempt}")
            try:
                value = next_call(context)
            except Exception as exc:
                note(f"{name} saw {type(exc).__name__}")
                raise
            note(f"{name} out")
            return value

        return call

    return make


outer = _tracing("outer")
inner = _tracing("inner")


def raises_before(next_call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def call(context: Any) -> Any:
        raise PermissionError("refused by a middleware")

    return call


def snoozes_first_attempt(next_call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def call(context: Any) -> Any:
        if context.attempt == 1:
            raise Snooze(delay=0)
        return next_call(context)

    return call


def answers_itself(next_call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def call(context: Any) -> Any:
        return {"from": "middleware"}

    return call


def returns_none(next_call: Callable[[Any], Any]) -> None:
    return None


not_callable = 42


@task(max_attempts=1)
def noted(context: Any, fail: bool = False) -> str:
    note("body")
    if fail:
        raise ValueError("the body failed")
    return "done"


@task(max_attempts=1)
def logs_inside(context: Any) -> None:
    logger.warning("inside a job")


@task(max_attempts=1)
async def logs_inside_async() -> None:
    await asyncio.sleep(0)
    logger.warning("inside an async job")


def in_another_thread(next_call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Calls on from a thread of its own (as a middleware enforcing a deadline might)."""
    import concurrent.futures

    def call(context: Any) -> Any:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(next_call, context).result()

    return call


def raises_after(next_call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def call(context: Any) -> Any:
        next_call(context)
        raise PermissionError("refused after the body ran")

    return call

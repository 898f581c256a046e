"""The event loop async bodies run on: one loop, on its own thread, one body per slot.

asyncio lets a ``SystemExit`` or ``KeyboardInterrupt`` that a coroutine raises out of the
loop, which would end the loop's thread and leave every body running on it waiting forever.
Here the thread runs the loop again: the coroutine's future already holds the exception, so
the body's caller gets it as the body's ending (``ending.py``), and the other bodies go on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any

from ..context import JobContext
from ..exceptions import JobCancelled, JobTimeout

logger = logging.getLogger("django_workqueue.worker")


class AsyncLoop:
    """The event loop async bodies run on, on its own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="workqueue-asyncio", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                self.loop.run_forever()
            except (SystemExit, KeyboardInterrupt) as exc:
                # A body's (see the module): its future holds it; the loop goes on.
                logger.debug("an async body raised %s; the event loop goes on", type(exc).__name__)
            else:
                return  # close() stopped it

    def run(
        self, coro: Coroutine[Any, Any, Any], context: JobContext, timeout: float | None
    ) -> Any:
        async def guarded() -> Any:
            try:
                async with asyncio.timeout(timeout) as scope:
                    return await coro
            except TimeoutError:
                if scope.expired():  # our timeout, not a TimeoutError of the task's own
                    raise JobTimeout(f"the task ran past its timeout of {timeout}s") from None
                raise

        future = asyncio.run_coroutine_threadsafe(guarded(), self.loop)
        while True:
            try:
                return future.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if context.cancelled.is_set() and not future.done():
                    future.cancel()
            except concurrent.futures.CancelledError:
                raise JobCancelled(context._why(), reason=context.abort_reason) from None

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)

"""The worker's event loop: async tasks run on one loop, on its own thread, one per slot."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any

from ..context import JobContext
from ..exceptions import JobCancelled, JobTimeout


class AsyncLoop:
    """The worker's event loop, on its own thread; async tasks run on it one per slot."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="workqueue-asyncio", daemon=True
        )
        self.thread.start()

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

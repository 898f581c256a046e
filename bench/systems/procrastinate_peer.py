"""Procrastinate 3 (psycopg 3 pool): ``defer_async`` / ``batch_defer_async``; async worker.

The task is async and the worker runs it with ``concurrency`` > 1, as Procrastinate advises
for I/O-bound async tasks. Jobs stay in ``procrastinate_jobs`` with status ``succeeded``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from .base import System


class Procrastinate(System):
    name = "procrastinate"
    label = "Procrastinate"
    table_prefix = "procrastinate_"
    unfinished_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'"
    single_api = "await noop.defer_async(key=i)"
    bulk_api = "await noop.batch_defer_async(*kwargs)"

    def install(self) -> None:
        self.client("install")

    def drain_settings(self) -> list[dict[str, Any]]:
        return [{"concurrency": k} for k in self.options.procrastinate_concurrency]

    def worker_command(self, setting: dict[str, Any], *, burst: bool) -> list[str]:
        command = [sys.executable, "-m", "bench.peers.procrastinate_worker",
                   "--concurrency", str(setting.get("concurrency", 1))]  # fmt: skip
        return [*command, "--drain"] if burst else command

    def start_worker(self, setting: dict[str, Any], *, burst: bool, tag: str = "", **env: str):  # type: ignore[no-untyped-def]
        pool = str(int(setting.get("concurrency", 1)) + 4)
        return super().start_worker(
            setting, burst=burst, tag=tag, BENCH_PROCRASTINATE_POOL=pool, **env
        )

    def latency_variants(self) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
        return [("", {"concurrency": 10}, {})]


def _app() -> Any:
    from bench.peers.procrastinate_app import app, noop

    return app, noop


def client_install() -> bool:
    app, _ = _app()

    async def run() -> None:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(run())
    return True


def client_enqueue_single(n: int) -> float:
    app, noop = _app()

    async def run() -> float:
        async with app.open_async():
            await noop.defer_async(key=-1)
            started = time.perf_counter()
            for key in range(n):
                await noop.defer_async(key=key)
            return n / (time.perf_counter() - started)

    return asyncio.run(run())


def client_enqueue_bulk(n: int, batch: int) -> float:
    app, noop = _app()

    async def run() -> float:
        async with app.open_async():
            await noop.batch_defer_async({"key": -1})
            started = time.perf_counter()
            for start in range(0, n, batch):
                await noop.batch_defer_async(
                    *({"key": key} for key in range(start, min(n, start + batch)))
                )
            return n / (time.perf_counter() - started)

    return asyncio.run(run())


def client_fill(n: int) -> int:
    app, noop = _app()

    async def run() -> None:
        async with app.open_async():
            for start in range(0, n, 5000):
                await noop.batch_defer_async(
                    *({"key": key} for key in range(start, min(n, start + 5000)))
                )

    asyncio.run(run())
    return n


def client_latency(n: int, gap: float, stamp_file: str) -> list[float]:
    from bench.latency import measure_async

    app, noop = _app()

    async def run() -> list[float]:
        async with app.open_async():

            async def enqueue(key: int) -> None:
                await noop.defer_async(key=key)

            return await measure_async(enqueue, n, gap, Path(stamp_file))

    return asyncio.run(run())

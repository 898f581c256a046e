"""PgQueuer 1.6 (asyncpg): ``Queries.enqueue`` for single and batch inserts, a QueueManager worker.

Schema: ``pgq install`` (default durability). Finished jobs leave the ``pgqueuer`` table, so
"unfinished" is whatever rows remain in it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from .. import pgadmin
from .base import System


class PgQueuer(System):
    name = "pgqueuer"
    label = "PgQueuer"
    table_prefix = "pgqueuer"
    unfinished_sql = "SELECT count(*) FROM pgqueuer"
    single_api = 'await queries.enqueue("noop", payload)'
    bulk_api = "await queries.enqueue([...], [...], [...])"

    def install(self) -> None:
        import subprocess

        pgq = Path(sys.executable).parent / "pgq"
        subprocess.run(
            [str(pgq), "--pg-dsn", pgadmin.url(self.database), "install"],
            env=self.env(), check=True, capture_output=True,
        )  # fmt: skip

    def drain_settings(self) -> list[dict[str, Any]]:
        return [{"batch_size": size} for size in self.options.pgq_batch]

    def worker_command(self, setting: dict[str, Any], *, burst: bool) -> list[str]:
        command = [sys.executable, "-m", "bench.peers.pgqueuer_worker",
                   "--batch-size", str(setting.get("batch_size", 10))]  # fmt: skip
        return [*command, "--drain"] if burst else command

    def latency_variants(self) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
        return [("", {"batch_size": 10}, {})]


async def _queries() -> Any:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    connection = await asyncpg.connect(os.environ["BENCH_DSN"])
    return Queries(AsyncpgDriver(connection))


def client_enqueue_single(n: int) -> float:
    async def run() -> float:
        queries = await _queries()
        await queries.enqueue("noop", b"-1")
        started = time.perf_counter()
        for key in range(n):
            await queries.enqueue("noop", str(key).encode())
        return n / (time.perf_counter() - started)

    return asyncio.run(run())


async def _bulk(queries: Any, keys: range) -> None:
    await queries.enqueue(
        ["noop"] * len(keys), [str(key).encode() for key in keys], [0] * len(keys)
    )


def client_enqueue_bulk(n: int, batch: int) -> float:
    async def run() -> float:
        queries = await _queries()
        await _bulk(queries, range(-1, 0))
        started = time.perf_counter()
        for start in range(0, n, batch):
            await _bulk(queries, range(start, min(n, start + batch)))
        return n / (time.perf_counter() - started)

    return asyncio.run(run())


def client_fill(n: int) -> int:
    async def run() -> None:
        queries = await _queries()
        for start in range(0, n, 5000):
            await _bulk(queries, range(start, min(n, start + 5000)))

    asyncio.run(run())
    return n


def client_latency(n: int, gap: float, stamp_file: str) -> list[float]:
    from bench.latency import measure_async

    async def run() -> list[float]:
        queries = await _queries()

        async def enqueue(key: int) -> None:
            await queries.enqueue("noop", str(key).encode())

        return await measure_async(enqueue, n, gap, Path(stamp_file))

    return asyncio.run(run())

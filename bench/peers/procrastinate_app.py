"""The Procrastinate app: an async no-op task on a psycopg 3 connection pool.

The pool size comes from BENCH_PROCRASTINATE_POOL: the worker sets it to its concurrency + 4
(jobs, fetching, LISTEN, heartbeat, abort polling), so no job waits for a connection.
"""

from __future__ import annotations

import os

import procrastinate

from bench.stamp import stamp

POOL_SIZE = int(os.environ.get("BENCH_PROCRASTINATE_POOL", "8"))

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=os.environ.get("BENCH_DSN", ""), min_size=1, max_size=POOL_SIZE
    )
)


@app.task(name="noop", queue="default")
async def noop(key: int) -> None:
    stamp(key)

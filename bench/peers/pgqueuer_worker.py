"""A PgQueuer worker process: ``PgQueuer`` on one asyncpg connection, as PgQueuer documents.

    python -m bench.peers.pgqueuer_worker --batch-size 10 [--drain]

``--drain`` uses PgQueuer's QueueExecutionMode.drain: exit once the queue is empty.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

from bench.stamp import stamp


async def main(batch_size: int, drain: bool) -> None:
    connection = await asyncpg.connect(os.environ["BENCH_DSN"])
    manager = PgQueuer.from_asyncpg_connection(connection)

    @manager.entrypoint("noop")
    async def noop(job: Job) -> None:
        stamp(int(job.payload or b"0"))

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, manager.shutdown.set)
    mode = QueueExecutionMode.drain if drain else QueueExecutionMode.continuous
    await manager.run(batch_size=batch_size, mode=mode)
    await connection.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--drain", action="store_true")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.batch_size, arguments.drain))

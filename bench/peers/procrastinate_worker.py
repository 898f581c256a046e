"""A Procrastinate worker process (the app lives in ``procrastinate_app``, as Procrastinate asks).

    python -m bench.peers.procrastinate_worker --concurrency 10 [--drain] [--no-listen]

``--drain`` is Procrastinate's ``wait=False``: the worker exits once it has caught up.
"""

from __future__ import annotations

import argparse
import asyncio

from bench.peers.procrastinate_app import app


async def main(concurrency: int, drain: bool, listen: bool) -> None:
    async with app.open_async():
        await app.run_worker_async(
            queues=["default"], concurrency=concurrency, wait=not drain, listen_notify=listen
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--drain", action="store_true")
    parser.add_argument("--no-listen", dest="listen", action="store_false")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.concurrency, arguments.drain, arguments.listen))

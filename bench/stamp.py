"""What every benchmark task does: nothing, unless a latency run asks it to note its start time.

The latency runs set ``BENCH_STAMP_FILE``; each task then appends ``"<key> <time.time()>"`` to
it. The enqueuing process and the worker run on the same machine, so both read one clock.
Appends of one short line are atomic, so concurrent tasks never interleave their lines.
"""

from __future__ import annotations

import os
import time

STAMP_FILE = os.environ.get("BENCH_STAMP_FILE") or None


def stamp(key: int) -> None:
    if STAMP_FILE is not None:
        started = time.time()
        with open(STAMP_FILE, "a") as file:
            file.write(f"{key} {started:.6f}\n")

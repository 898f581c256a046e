"""A py-spy profile of one django-workqueue drain: where a worker process spends its time.

The worker (``runworker --burst`` at the best concurrency) starts on a full queue; after a
short start-up py-spy records it twice for ``profile_seconds`` each: once only the thread that
holds the GIL (where Python spends CPU: with the GIL, that bounds a process's throughput), and
once every thread, dropping samples of threads that merely wait for work (so what remains is
Python running or a round trip to PostgreSQL). Function names merge lines of one function.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .bootstrap import BENCH_DIR
from .systems.base import System

RATE = 100
RAW_GIL = BENCH_DIR / "results" / "profile-gil.txt"
RAW_WALL = BENCH_DIR / "results" / "profile-wall.txt"
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+)(?::\d+)?\)$")


def _name(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (package/file.py)``; lines are merged."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = Path(match["file"])
    short = (
        "/".join(path.parts[-2:])
        if "site-packages" not in path.parts
        else "/".join(path.parts[path.parts.index("site-packages") + 1 :][:3])
    )
    return f"{match['func']} ({short})"


# Samples that only show a thread waiting for something to do: a thread blocked in a C call
# right in its loop (a queue ``get``), on a threading primitive, or on the LISTEN socket.
_IDLE_LEAVES = ("Condition.wait", "Event.wait")
_IDLE_ANYWHERE = ("Connection.notifies",)


# Frames on (nearly) every stack say nothing about where time goes.
_PLUMBING = ("(threading.py)", "(management/__init__.py)", "(management/base.py)",
             "(manage.py)", "(commands/runworker.py)")  # fmt: skip


def _idle(frames: list[str]) -> bool:
    functions = [frame.split(" (", 1)[0] for frame in frames]
    if functions[-1] in _IDLE_LEAVES or any(f in functions for f in _IDLE_ANYWHERE):
        return True
    # The leaf is the thread's own target (the frame right under Thread.run): blocked in C.
    return len(functions) >= 2 and functions[-2] == "Thread.run"


def summarise(raw: Path, top: int = 20, *, busy_only: bool = False) -> dict[str, Any]:
    self_counts: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = idle = database = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_name(frame) for frame in stack.split(";") if frame]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        if busy_only and _idle(frames):
            idle += count
            continue
        total += count
        if any(frame.startswith("Connection.wait (") for frame in frames):
            database += count
        self_counts[frames[-1]] += count
        for name in set(frames):
            if not name.endswith(_PLUMBING):
                inclusive[name] += count

    def share(counter: collections.Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": name, "samples": n, "percent": round(100 * n / max(total, 1), 1)}
            for name, n in counter.most_common(top)
        ]

    return {
        "samples": total,
        "idle_samples_dropped": idle,
        "waiting_on_database_percent": round(100 * database / max(total, 1), 1),
        "self": share(self_counts),
        "inclusive": share(inclusive),
    }


def _record(pid: int, seconds: float, output: Path, *extra: str) -> None:
    py_spy = Path(sys.executable).parent / "py-spy"
    output.unlink(missing_ok=True)
    done = subprocess.run(
        [str(py_spy), "record", "--pid", str(pid), "--duration", str(int(seconds)),
         "--rate", str(RATE), "--format", "raw", "--output", str(output), *extra],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0 or not output.exists():
        raise RuntimeError(f"py-spy failed ({done.returncode}): {done.stderr[-2000:]}")


def profile(system: System, jobs: int, seconds: float, setting: dict[str, Any], log: Any) -> dict:
    """Two recordings of one drain: GIL holders (Python CPU), then all busy threads (wall)."""
    system.reset()
    system.client("fill", n=jobs)
    system.after_fill()
    worker = system.start_worker(setting, burst=True, tag="profile")
    try:
        time.sleep(1.5)  # past Django's start-up: profile the steady drain
        _record(worker.process.pid, seconds, RAW_GIL, "--gil")
        _record(worker.process.pid, seconds, RAW_WALL)
        finished_early = worker.process.poll() is not None
    finally:
        worker.stop()
    result = {
        "setting": system.describe(setting),
        "jobs": jobs,
        "seconds": seconds,
        "drain_ended_before_sampling_did": finished_early,
        "gil": {**summarise(RAW_GIL), "raw": str(RAW_GIL)},
        "samples_per_second": RATE,
        "wall": {**summarise(RAW_WALL, busy_only=True), "raw": str(RAW_WALL)},
    }
    log(f"{system.name}: profile written to {RAW_GIL.name} and {RAW_WALL.name}")
    return result


def render(result: dict[str, Any], top: int = 12) -> str:
    gil, wall = result["gil"], result["wall"]
    early = " - WARNING: the drain ended early" if result["drain_ended_before_sampling_did"] else ""
    held = 100 * gil["samples"] / (result["samples_per_second"] * result["seconds"])
    lines = [
        f"py-spy profile of one runworker drain ({result['setting']}, {result['seconds']:.0f}s "
        f"per recording){early}",
        f"  GIL held in {held:.0f}% of samples; by the holder's own function (self time):",
        *(f"    {row['percent']:5.1f}%  {row['function']}" for row in gil["self"][:top]),
        f"  busy threads ({wall['samples']} samples, {wall['idle_samples_dropped']} idle dropped; "
        f"{wall['waiting_on_database_percent']}% in a PostgreSQL round trip), inclusive:",
        *(f"    {row['percent']:5.1f}%  {row['function']}" for row in wall["inclusive"][:top]),
    ]
    return "\n".join(lines)

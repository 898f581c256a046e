"""What one worker pass costs PostgreSQL, replayed without a worker: instructions per job.

    DATABASE_URL=postgres://... python -m bench.pass_replay --size 48 --passes 10,40
    DATABASE_URL=postgres://... python -m bench.pass_replay --callgrind /path/to/output/dir

The drain's PostgreSQL CPU (``db_cost``) moves by ±20 % between runs of one commit on a loaded
two-core machine, which hides the effect of most changes to the pass's statement. This replays
the one-statement pass (``Driver.record_and_claim``) alone, in one process and one session,
with fixed sizes: first a claim of ``size`` no-op jobs, then pass after pass writing the last
claim's successes and claiming ``size`` more, among ``--extra`` ready jobs, so that the work is
the same on every run. It prints the backend's CPU per job (``/proc``: as noisy as the drain's).

With ``--callgrind DIR``, the server runs under ``valgrind --tool=callgrind
--callgrind-out-file=DIR/cg.%p`` (a private cluster on a port of its own, migrated first; see
docs/explanation/performance.md). The replay then runs twice, with the two pass counts of
``--passes``, and prints the instructions the backend executed per job of the extra passes:
everything a session does once (connecting, its first five custom plans, the generic one) is
in both runs and cancels out. Instruction counts repeat to within 0.1 % from run to run,
whatever else the machine does.

The database needs the project's tables (``manage.py migrate``); the replay empties the jobs
and counters tables first.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWNER = "pass-replay"


def replay(size: int, passes: int, extra: int) -> tuple[int, float]:
    """Run ``passes`` passes of ``size`` in a fresh session; returns (its backend's pid, the
    backend's CPU seconds over the passes). Runs in a child process (``--child``)."""
    import django

    django.setup()
    from django.db import connection

    from bench.workqueue_tasks import noop
    from django_workqueue.db import driver_for
    from django_workqueue.models import Job, StatsCounter
    from django_workqueue.outcomes import Outcome, OutcomeKind
    from django_workqueue.stats import counters

    with connection.cursor() as cursor:
        cursor.execute(
            f"TRUNCATE {Job._meta.db_table} CASCADE; TRUNCATE {StatsCounter._meta.db_table}"
        )
    noop.enqueue_many([((i,), {}) for i in range(size * (passes + 1) + extra)])
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
    connection.close()  # the passes get a session of their own
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    driver = driver_for("default")
    claimed: list = []
    before = _cpu_ticks(pid)
    for _ in range(passes):
        outcomes = [
            Outcome(job_id=job.id, attempt=job.attempt, kind=OutcomeKind.SUCCEEDED,
                    max_attempts=job.max_attempts, result_json="null",
                    task_name=job.task_name, queue=job.queue)
            for job in claimed
        ]  # fmt: skip
        write = counters.counted_write(OWNER, outcomes)
        _, claimed = driver.record_and_claim(OWNER, write, ["default"], size)
        if len(claimed) != size:
            raise RuntimeError(f"a pass claimed {len(claimed)} jobs, not {size}")
    seconds = (_cpu_ticks(pid) - before) / os.sysconf("SC_CLK_TCK")
    connection.close()  # the backend ends: callgrind writes its counts
    return pid, seconds


def _cpu_ticks(pid: int) -> int:
    """utime + stime of a process on this machine (0 if the server is elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def _run_child(size: int, passes: int, extra: int) -> tuple[int, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    command = [sys.executable, "-m", "bench.pass_replay", "--child",
               "--size", str(size), "--passes", str(passes), "--extra", str(extra)]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    pid, seconds = done.stdout.split()[-2:]
    return int(pid), float(seconds)


def _instructions(directory: Path, pid: int, timeout: float = 60.0) -> int:
    """The instructions (``totals:``) callgrind counted for backend ``pid``, once written."""
    path = directory / f"cg.{pid}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            found = re.search(r"^totals: (\d+)", path.read_text(), re.MULTILINE)
            if found:
                return int(found.group(1))
        time.sleep(0.2)
    raise RuntimeError(f"no callgrind counts for backend {pid} in {path}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=48, help="jobs written and claimed a pass")
    parser.add_argument("--passes", default="10,40", help="pass counts of the two runs")
    parser.add_argument("--extra", type=int, default=20_000, help="more ready jobs beside")
    parser.add_argument("--callgrind", type=Path, help="the server's callgrind output directory")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        pid, seconds = replay(args.size, int(args.passes), args.extra)
        print(pid, seconds)
        return
    first, second = (int(n) for n in args.passes.split(","))
    if second <= first:
        parser.error("--passes: two pass counts, the second larger (e.g. 10,40)")
    runs = [(n, *_run_child(args.size, n, args.extra)) for n in (first, second)]
    jobs = args.size * (second - first)
    cpu = (runs[1][2] - runs[0][2]) / jobs * 1e6
    line = f"pass replay, {args.size} jobs a pass: backend CPU {cpu:.1f} µs/job"
    if args.callgrind is not None:
        counts = [_instructions(args.callgrind, pid) for _, pid, _ in runs]
        line += f", {(counts[1] - counts[0]) / jobs:,.0f} instructions/job"
    print(line)


if __name__ == "__main__":
    main(sys.argv[1:])

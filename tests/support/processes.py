"""Real ``manage.py runworker`` subprocesses, for the acceptance tests and the fault battery.

A ``RunworkerProcess`` is one worker started with the test interpreter from the repository root,
connected to the very database pytest-django created for the session (see ``database_url``);
its stdout and stderr go to files so that a failing test can show them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from tests.support.waiting import wait_until

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
MANAGE_PY = REPO_ROOT / "manage.py"

# Short intervals so that recovery happens within seconds; the engine's defaults are for
# production. The reaper runs often so that an expired lease is reaped soon after it expires.
FAST_SETTINGS = {
    "WORKQUEUE_POLL_INTERVAL": "0.1",
    "WORKQUEUE_REAPER_INTERVAL": "0.2",
    # A killed maintainer is replaced within 1.5 s, before the jobs' leases of a crash test run out.
    "WORKQUEUE_MAINTENANCE_LEASE_SECONDS": "1.5",
    "WORKQUEUE_LOG_LEVEL": "INFO",
}


def database_url(settings_dict: Mapping[str, Any]) -> str:
    """A DATABASE_URL naming the database behind ``settings_dict`` (the live test database)."""
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        # sqlite:/// + an absolute path: four slashes, django-environ keeps the leading one.
        return f"sqlite:///{Path(settings_dict['NAME']).resolve()}"
    if engine.endswith("postgresql"):
        user = quote(settings_dict.get("USER") or "", safe="")
        password = settings_dict.get("PASSWORD") or ""
        userinfo = f"{user}:{quote(password, safe='')}" if password else user
        host = settings_dict.get("HOST") or "127.0.0.1"
        port = settings_dict.get("PORT") or 5432
        return f"postgres://{userinfo}@{host}:{port}/{quote(settings_dict['NAME'], safe='')}"
    raise NotImplementedError(f"no DATABASE_URL for {engine}")


def worker_environment(settings_dict: Mapping[str, Any], **overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(settings_dict),
        DJANGO_SETTINGS_MODULE="testproject.settings",
        PYTHONUNBUFFERED="1",  # stdout is a file: flush every line so failures show it all
        # A worker that does not exit when it should is sent SIGABRT (``wait``): every
        # thread's stack goes to its stderr, and so into the failure's report.
        PYTHONFAULTHANDLER="1",
        **FAST_SETTINGS,
    )
    env.update(overrides)
    return env


def run_manage(args: Iterable[str], env: Mapping[str, str], timeout: float = 60) -> Any:
    """Run ``manage.py <args>`` to completion; return the ``CompletedProcess`` (text output)."""
    return subprocess.run(
        [sys.executable, str(MANAGE_PY), *args],
        cwd=REPO_ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


StartWorker = Callable[..., "RunworkerProcess"]


def worker_starter(
    build_env: Callable[..., dict[str, str]], log_dir: Path
) -> tuple[StartWorker, list[RunworkerProcess]]:
    """A ``start(*args, name=..., env={...})`` for a fixture, and the list of what it started
    (for the fixture to kill and describe at teardown)."""
    started: list[RunworkerProcess] = []

    def start(
        *args: str, name: str = "worker", env: dict[str, str] | None = None
    ) -> RunworkerProcess:
        process = RunworkerProcess(name, args, build_env(**(env or {})), log_dir)
        started.append(process)
        return process

    return start, started


def stop_started(started: Iterable[RunworkerProcess]) -> None:
    """Teardown: SIGKILL every process still alive, then print each one's logs (pytest shows
    them only when the test failed)."""
    processes = list(started)
    for process in processes:
        process.kill()
    for process in processes:
        print(process.describe())


class WorkerExited(AssertionError):
    """A worker process ended while a test still expected it to run."""


class RunworkerProcess:
    """One ``manage.py runworker`` process with its own ``--worker-id`` (the lease owner)."""

    def __init__(
        self,
        name: str,
        args: Iterable[str],
        env: Mapping[str, str],
        log_dir: Path,
        *,
        prefix: Iterable[str] = (),
    ) -> None:
        """``prefix``: a command the worker is run under, e.g. ``ip netns exec <ns>`` (which
        execs it in place: the process's pid is the worker's)."""
        self.name = name
        self.worker_id = f"{name}-{uuid.uuid4().hex[:12]}"
        self.args = ["runworker", "--worker-id", self.worker_id, *args]
        self.stdout_path = log_dir / f"{self.worker_id}.stdout"
        self.stderr_path = log_dir / f"{self.worker_id}.stderr"
        with self.stdout_path.open("wb") as stdout, self.stderr_path.open("wb") as stderr:
            self.popen = subprocess.Popen(
                [*prefix, sys.executable, str(MANAGE_PY), *self.args],
                cwd=REPO_ROOT,
                env=dict(env),
                stdout=stdout,
                stderr=stderr,
            )

    def __repr__(self) -> str:
        return f"<runworker {self.worker_id} pid={self.pid} returncode={self.returncode}>"

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def send(self, signum: signal.Signals) -> None:
        self.popen.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL (works on a SIGSTOPped process too) and reap the process."""
        if self.alive:
            self.popen.kill()
        self.popen.wait(timeout=30)

    def wait(self, timeout: float = 30) -> int:
        """Wait for the process to exit and return its exit code (-N: killed by signal N)."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.dump_stacks()
            raise AssertionError(
                f"{self!r} still running after {timeout}s\n{self.describe()}"
            ) from None

    def dump_stacks(self) -> None:
        """Have a process that hangs print every thread's stack to its stderr and end
        (SIGABRT, which ``PYTHONFAULTHANDLER`` catches), so that a report shows where it hung."""
        if not self.alive:
            return
        self.send(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def logged(self, text: str) -> bool:
        """Whether the worker's log (stderr, where the logging handler writes) contains ``text``."""
        return text in self.stderr

    def wait_logged(self, text: str, timeout: float = 30) -> None:
        wait_for(lambda: self.logged(text), alive=[self], timeout=timeout, message=repr(text))

    def wait_started(self, timeout: float = 30) -> None:
        self.wait_logged(f"worker {self.worker_id} started", timeout=timeout)

    def describe(self) -> str:
        return (
            f"--- {self!r}: {' '.join(self.args)}\n"
            f"--- stdout:\n{self.stdout}\n--- stderr:\n{self.stderr}"
        )


def wait_for(
    condition: Callable[[], T],
    *,
    alive: Iterable[RunworkerProcess] = (),
    timeout: float = 30,
    message: str = "",
) -> T:
    """``wait_until`` that fails at once, with the logs, if a worker in ``alive`` has exited."""
    expected = list(alive)

    def check() -> T:
        for process in expected:
            if not process.alive:
                raise WorkerExited(f"{process!r} exited unexpectedly\n{process.describe()}")
        return condition()

    return wait_until(check, timeout=timeout, interval=0.02, message=message)


def restart_until(
    done: Callable[[], bool],
    start: Callable[[int], RunworkerProcess],
    *,
    most: int,
    timeout: float = 60,
    message: str = "",
) -> tuple[list[RunworkerProcess], RunworkerProcess]:
    """Keep one worker running, as systemd or Kubernetes would: ``start(n)`` starts the n-th
    whenever the last has exited, until ``done()``; at most ``most`` may exit. Return the
    workers that exited and the one running."""
    exited: list[RunworkerProcess] = []
    current = start(0)

    def supervise() -> bool:
        nonlocal current
        if done():
            return True
        if not current.alive:
            exited.append(current)
            assert len(exited) <= most, f"workers kept exiting: {exited}"
            current = start(len(exited))
        return False

    wait_until(supervise, timeout=timeout, message=message)
    return exited, current


# --- the processes a worker started (its pool's children), read from /proc (Linux) ----------------


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """A process as /proc names it: its pid and its start time (clock ticks since boot), so
    that a pid the kernel has handed to a new process is not taken for the old one."""

    pid: int
    started: int

    @property
    def running(self) -> bool:
        """Alive and the same process: neither exited (a zombie has) nor replaced."""
        stat = _stat(self.pid)
        return stat is not None and stat[0] != "Z" and int(stat[19]) == self.started


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def pid_running(pid: int) -> bool:
    """Whether a process ``pid`` exists and has not exited (a zombie has)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def identify(pid: int) -> ProcessIdentity:
    stat = _stat(pid)
    assert stat is not None, f"no process {pid}"
    return ProcessIdentity(pid, int(stat[19]))


def processes_naming(text: str) -> list[ProcessIdentity]:
    """The live processes whose command line contains ``text`` (e.g. a worker id, which the
    process pool's children are given as an argument, and keep once their parent is gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError):
            continue
        stat = _stat(int(entry.name))
        if text in cmdline and stat is not None and stat[0] != "Z":
            found.append(ProcessIdentity(int(entry.name), int(stat[19])))
    return found


def children_of(pid: int) -> list[ProcessIdentity]:
    """The live (not zombie) child processes of ``pid``."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is not None and int(stat[1]) == pid and stat[0] != "Z":
            children.append(ProcessIdentity(int(entry.name), int(stat[19])))
    return children

"""What the harness needs from each system, and how it runs their processes.

The orchestrator (``bench/run.py``) never imports a system's library: every enqueue and every
fill happens in a fresh client process (``python -m bench.client <system> <action>``) and every
drain in the system's own worker process, so each system runs with its own settings and
connections, exactly as an application would use it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from .. import pgadmin
from ..bootstrap import BENCH_DIR, ROOT

LOG_DIR = BENCH_DIR / "results" / "logs"
RESULT_PREFIX = "BENCH-RESULT "


class Options:
    """The command-line options the systems read (poll interval, settings to try, ...)."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)


class System:
    name: ClassVar[str]
    label: ClassVar[str]
    table_prefix: ClassVar[str] = ""
    unfinished_sql: ClassVar[str] = ""
    has_bulk: ClassVar[bool] = True
    bulk_api: ClassVar[str] = ""
    single_api: ClassVar[str] = ""

    def __init__(self, options: Options) -> None:
        self.options = options

    # --- database ---------------------------------------------------------------------------

    @property
    def database(self) -> str:
        return f"{pgadmin.DATABASE_PREFIX}{self.name}"

    def create(self) -> None:
        pgadmin.create_database(self.database)
        self.install()

    def drop(self) -> None:
        pgadmin.drop_database(self.database)

    def install(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        pgadmin.reset(self.database, self.table_prefix)

    def after_fill(self) -> None:
        pgadmin.vacuum_analyze(self.database)

    def unfinished(self) -> int:
        return int(pgadmin.scalar(self.database, self.unfinished_sql))

    # --- processes --------------------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("DJANGO_SETTINGS_MODULE", None)
        env.update(
            PYTHONPATH=str(ROOT),
            BENCH_DB=self.database,
            BENCH_DSN=pgadmin.url(self.database),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.system_env())
        env.update(extra)
        return env

    def system_env(self) -> dict[str, str]:
        return {}

    def drain_settings(self) -> list[dict[str, Any]]:
        return [{}]

    def describe(self, setting: dict[str, Any]) -> str:
        return ", ".join(f"{key}={value}" for key, value in setting.items()) or "default"

    def worker_command(self, setting: dict[str, Any], *, burst: bool) -> list[str]:
        raise NotImplementedError

    def latency_variants(self) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
        """(variant name, worker setting, extra env) for each pickup-latency measurement."""
        return [("", self.drain_settings()[0], {})]

    def client(
        self,
        action: str,
        timeout: float = 1800,
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run one client action in a fresh process and return what it printed as its result;
        ``env`` adds to the process's environment (e.g. ``PGOPTIONS`` for its sessions)."""
        command = [sys.executable, "-m", "bench.client", self.name, action, json.dumps(kwargs)]
        done = subprocess.run(
            command, env=self.env(**(env or {})), cwd=ROOT, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        results = [
            line[len(RESULT_PREFIX) :]
            for line in done.stdout.splitlines()
            if line.startswith(RESULT_PREFIX)
        ]
        if done.returncode != 0 or not results:
            raise RuntimeError(
                f"{self.name} client {action} failed (exit {done.returncode}):\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
            )
        return json.loads(results[-1])

    def start_client(self, action: str, *, tag: str, **kwargs: Any) -> WorkerProcess:
        """Start one client action in the background (a producer beside a drain); its output,
        the result line too, goes to bench/results/logs/<system>-<tag>.log."""
        command = [sys.executable, "-m", "bench.client", self.name, action, json.dumps(kwargs)]
        return WorkerProcess(command, self.env(), f"{self.name}-{tag}")

    def run_workers(
        self, setting: dict[str, Any], processes: int = 1, timeout: float = 1800, **env: str
    ) -> float:
        """Start ``processes`` burst workers together; return seconds until the last one exits."""
        started = time.perf_counter()
        workers = [
            self.start_worker(setting, burst=True, tag=str(n), **env) for n in range(processes)
        ]
        for worker in workers:
            worker.wait(timeout=max(1.0, timeout - (time.perf_counter() - started)))
        elapsed = time.perf_counter() - started
        for worker in workers:
            worker.check()
        return elapsed

    def start_worker(
        self, setting: dict[str, Any], *, burst: bool, tag: str = "", **env: str
    ) -> WorkerProcess:
        command = self.worker_command(setting, burst=burst)
        return WorkerProcess(command, self.env(**env), f"{self.name}{'-' + tag if tag else ''}")


class WorkerProcess:
    """One worker subprocess, its output in bench/results/logs/<name>.log."""

    def __init__(self, command: list[str], env: dict[str, str], name: str) -> None:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"{name}.log"
        self.command = command
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"worker {self.command} did not finish in {timeout:.0f}s") from None
        finally:
            self._log.flush()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (every system here drains on it), then SIGKILL if it hangs."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def check(self) -> None:
        self._log.close()
        if self.process.returncode != 0:
            tail = Path(self.log_path).read_text()[-3000:]
            raise RuntimeError(f"worker {self.command} exited {self.process.returncode}:\n{tail}")

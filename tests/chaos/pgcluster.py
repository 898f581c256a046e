"""A throwaway PostgreSQL cluster for the faults the shared server must never suffer.

The restart, refusal and connection-count tests need a server they may stop, restart and
reconfigure: ``PostgresCluster`` runs ``initdb`` and ``pg_ctl`` in a temporary directory on a free
port (as the ``postgres`` OS user when the tests run as root, since PostgreSQL refuses to run as
root), with ``fsync`` off for speed, and removes it all at the end.

Its database ``wq`` belongs to the role ``wq``, a login without superuser rights, which the workers
connect as: a role's ``CONNECTION LIMIT`` applies to it (superusers are exempt), so a test can make
the server refuse the workers while the test itself, connected as ``postgres``, still reads the
tables. The schema is created by ``manage.py migrate``, as a deployment would.

Fixtures (import them into a test module):

- ``pgcluster`` (module scope): the running cluster, migrated.
- ``cluster_db``: for one test, the test process's ``default`` connection points at the cluster's
  database (as ``postgres``), so the ORM, ``enqueue`` and ``tests/chaos/harness.py`` (the checker,
  the supervisor) read and write the cluster; the tables are emptied first. These tests do not
  use pytest-django's test database on the shared server at all.
- ``cluster_worker``: starts ``runworker`` processes on the cluster as role ``wq`` (the acceptance
  tests' ``RunworkerProcess``); all are killed when the test ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.support.processes import (
    StartWorker,
    run_manage,
    stop_started,
    worker_environment,
    worker_starter,
)

BINDIR = Path(os.environ.get("WORKQUEUE_PG_BINDIR", "/usr/lib/postgresql/15/bin"))
PREFIX = "wq-pgcluster-"
OWNER_FILE = "owner.pid"  # the test process that created the cluster
DATABASE = "wq"
ROLE = "wq"  # the workers' role: not a superuser, so CONNECTION LIMIT applies to it
SUPERUSER = "postgres"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresCluster:
    """One PostgreSQL cluster in ``root``, listening on 127.0.0.1:``port`` only.

    >>> cluster = PostgresCluster.create()
    >>> cluster.restart(mode="immediate")  # a crash: every backend dies, recovery on start
    >>> cluster.destroy()
    """

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.data = root / "data"
        self.log = root / "server.log"
        self.options = {
            "port": str(port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(root),
            # Speed without changing what a crash (``stop("immediate")``) keeps: the OS does not
            # crash, so unsynced files survive. synchronous_commit stays on: off, a crash loses
            # commits already acknowledged (a claim, a completion), which the checker would
            # rightly report as an attempt run by two owners.
            "fsync": "off",
            "full_page_writes": "off",
            "shared_buffers": "32MB",
            "max_connections": "100",
            "log_connections": "on",  # who connected, and when, for a failing test's log
        }

    @classmethod
    def create(cls) -> PostgresCluster:
        if not (BINDIR / "initdb").exists():
            pytest.skip(f"no PostgreSQL server binaries in {BINDIR} (set WORKQUEUE_PG_BINDIR)")
        cls.remove_abandoned()
        root = Path(tempfile.mkdtemp(prefix=PREFIX))
        (root / OWNER_FILE).write_text(str(os.getpid()))
        cluster = cls(root, free_port())
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")  # the server's files belong to the user it runs as
        cluster._run(
            "initdb", "-D", str(cluster.data), "-U", SUPERUSER, "-A", "trust", "--no-sync",
            "-E", "UTF8", "--locale", "C.UTF-8",
        )  # fmt: skip
        for attempt in range(3):
            try:
                cluster.start()
                break
            except RuntimeError:  # the free port was taken meanwhile: another one
                if attempt == 2:
                    raise
                cluster.port = free_port()
                cluster.options["port"] = str(cluster.port)
        with cluster.connect() as admin:
            admin.execute(f"CREATE ROLE {ROLE} LOGIN")
            admin.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
        return cluster

    # --- the server -----------------------------------------------------------------------

    def _run(self, tool: str, *args: str, timeout: float = 120) -> str:
        command = [str(BINDIR / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode:
            raise RuntimeError(
                f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}\n"
                f"{self.log_text()[-4000:]}"
            )
        return done.stdout

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = " ".join(f"-c {key}={value}" for key, value in self.options.items())
        self._run("pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", "120", "-o", options)  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` ends every session cleanly, ``immediate`` is a crash."""
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w", "-t", "120")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    @property
    def running(self) -> bool:
        command = [str(BINDIR / "pg_ctl"), "status", "-D", str(self.data)]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, check=False).returncode == 0

    def destroy(self) -> None:
        if self.running:
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    @classmethod
    def remove_abandoned(cls) -> None:
        """Stop and remove clusters whose test process died without tearing them down (a
        SIGKILLed pytest); a cluster whose owner still runs is someone else's: left alone."""
        for root in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
            try:
                os.kill(int((root / OWNER_FILE).read_text()), 0)
                continue  # its test session is alive
            except ProcessLookupError:
                pass
            except (OSError, ValueError):
                continue  # not ours to judge (no owner file yet, or another user's)
            cluster = cls(root, 0)
            with contextlib.suppress(Exception):
                cluster.destroy()

    def log_size(self) -> int:
        return self.log.stat().st_size

    def log_lines(self, containing: str, since: int = 0) -> int:
        """How many lines of the server log after byte ``since`` contain ``containing``."""
        with self.log.open("rb") as log:
            log.seek(since)
            return sum(1 for line in log if containing.encode() in line)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # --- clients --------------------------------------------------------------------------

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        """A superuser connection in autocommit, outside Django (for faults and counts)."""
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname=dbname, autocommit=True,
            application_name="wq-chaos-test",
        )  # fmt: skip

    def settings_dict(self, user: str = SUPERUSER) -> dict[str, Any]:
        """Django connection settings for the jobs database, as ``user``."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": DATABASE,
            "USER": user,
            "PASSWORD": "",
            "HOST": "127.0.0.1",
            "PORT": self.port,
        }

    def worker_env(self, **overrides: str) -> dict[str, str]:
        """A ``runworker`` environment on the cluster as role ``wq`` (the acceptance settings)."""
        return worker_environment(self.settings_dict(ROLE), **overrides)

    def migrate(self) -> None:
        done = run_manage(["migrate", "--no-input", "-v", "0"], self.worker_env(), timeout=300)
        if done.returncode:
            raise RuntimeError(f"migrate failed:\n{done.stdout}\n{done.stderr}")

    def empty_tables(self) -> None:
        """Empty the job and test tables (the cluster outlives one test)."""
        with self.connect(DATABASE) as admin:
            tables = [
                row[0]
                for row in admin.execute(
                    "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' "
                    "AND (tablename LIKE 'django_workqueue%%' OR tablename LIKE 'testapp%%')"
                )
            ]
            admin.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY")

    def set_connection_limit(self, limit: int) -> None:
        """Refuse (0) or allow (-1) new connections of the workers' role."""
        with self.connect() as admin:
            admin.execute(f"ALTER ROLE {ROLE} CONNECTION LIMIT {int(limit)}")

    def backends(self, application_prefix: str = "workqueue:") -> list[tuple[int, str, str]]:
        """(pid, application_name, last query) of the client backends in the jobs database whose
        application name starts with ``application_prefix`` (workers name theirs
        ``workqueue:<worker id>``; an empty prefix lists them all)."""
        return [(pid, name, query) for pid, name, query, _ in self.sessions(application_prefix)]

    def sessions(self, application_prefix: str = "") -> list[tuple[int, str, str, float]]:
        """``backends`` with each one's age in seconds (a worker names a session right after
        it connects: for a moment, a new one has no name yet)."""
        with self.connect() as admin:
            rows = admin.execute(
                "SELECT pid, application_name, query, "
                "extract(epoch FROM clock_timestamp() - backend_start)::float8 "
                "FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' "
                "AND starts_with(application_name, %s) ORDER BY pid",
                [DATABASE, application_prefix],
            ).fetchall()
        return [(pid, name, query, age) for pid, name, query, age in rows]

    def terminate(self, application_prefix: str = "workqueue:") -> int:
        """``pg_terminate_backend`` every backend labelled by a worker; return how many."""
        with self.connect() as admin:
            row = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND starts_with(application_name, %s)",
                [DATABASE, application_prefix],
            ).fetchone()
        return int(row[0]) if row else 0

    def wait_accepting(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.connect():
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pgcluster() -> Iterator[PostgresCluster]:
    """A fresh cluster for the module, migrated; stopped and removed when the module ends."""
    if connection.vendor != "postgresql":  # the postgres_only marker skips these tests
        pytest.skip("PostgreSQL only by design")
    cluster = PostgresCluster.create()
    try:
        cluster.migrate()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def cluster_db(pgcluster: PostgresCluster, django_db_blocker: Any) -> Iterator[PostgresCluster]:
    """Point this process's ``default`` connection at the cluster for one test.

    Django's connection settings are one dict shared by every thread's wrapper: it is updated in
    place and restored afterwards, so a later test finds pytest-django's test database again.
    """
    if not pgcluster.running:  # a failed test may have left it stopped
        pgcluster.start()
    pgcluster.set_connection_limit(-1)
    pgcluster.empty_tables()
    with django_db_blocker.unblock():
        connection.close()
        saved = dict(connection.settings_dict)
        connection.settings_dict.update(pgcluster.settings_dict())
        try:
            yield pgcluster
        finally:
            connection.close()
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)


@pytest.fixture
def cluster_worker(cluster_db: PostgresCluster, tmp_path: Path) -> Iterator[StartWorker]:
    """Start ``runworker`` processes on the cluster (role ``wq``); all are killed at the end.

    >>> worker = cluster_worker("--concurrency", "4", name="a", env={"WORKQUEUE_GRACE": "1"})
    """
    start, started = worker_starter(cluster_db.worker_env, tmp_path)
    yield start
    stop_started(started)
    print(f"--- cluster log (tail):\n{cluster_db.log_text()[-6000:]}")

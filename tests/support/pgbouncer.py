"""PgBouncer in transaction pooling mode in front of the test PostgreSQL, started on a free port.

As a wrapper, it runs a command (the test suite) with the jobs traffic through the pooler and the
LISTEN connection straight to the server::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        python -m tests.support.pgbouncer pytest -m "not chaos"

The command gets ``DATABASE_URL`` rewritten to the pooler, ``WORKQUEUE_LISTEN_DSN`` with the
server's own host and port, ``WORKQUEUE_PREPARED_STATEMENTS=false`` (PgBouncer 1.18 keeps no
prepared statements across transactions), ``DISABLE_SERVER_SIDE_CURSORS=true`` (Django's advice
for transaction pooling) and ``WORKQUEUE_TEST_PGBOUNCER`` (the pooler's admin URL): runworker
subprocesses of the acceptance tests inherit all of it. ``Pooler`` is also what a test starts
for a pool of its own (``tests/integration/test_pooler.py``).

PgBouncer refuses to run as root: it is then started as ``nobody`` (``-u``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
ADMIN_ENV = "WORKQUEUE_TEST_PGBOUNCER"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Pooler:
    """One PgBouncer process (transaction pooling) in front of ``host:port``, for ``user``."""

    def __init__(
        self, *, host: str, port: int, user: str, password: str = "", pool_size: int = 20
    ) -> None:
        self.server = (host, port)
        self.user = user
        self.password = password
        self.pool_size = pool_size
        self.port = 0
        self.directory = Path(tempfile.mkdtemp(prefix="wq-pgbouncer-"))
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        """A DATABASE_URL for ``database`` through the pooler."""
        secret = f":{quote(self.password, safe='')}" if self.password else ""
        return f"postgres://{quote(self.user, safe='')}{secret}@127.0.0.1:{self.port}/{database}"

    def start(self) -> Pooler:
        self.port = free_port()
        config = self.directory / "pgbouncer.ini"
        users = self.directory / "users.txt"
        users.write_text(f'"{self.user}" "{self.password}"\n')
        host, port = self.server
        config.write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\nadmin_users = {self.user}\n"
            f"pool_mode = transaction\ndefault_pool_size = {self.pool_size}\n"
            "max_client_conn = 1000\n"
            # psycopg and Django send it at connect; PgBouncer 1.18 would refuse the client.
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.directory / 'pgbouncer.log'}\n"
        )
        command = [PGBOUNCER, "-q", str(config)]
        if os.geteuid() == 0:  # PgBouncer will not run as root
            nobody = pwd.getpwnam("nobody")
            os.chown(self.directory, nobody.pw_uid, nobody.pw_gid)
            for path in (config, users):
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
            command[1:1] = ["-u", "nobody"]
        self.process = subprocess.Popen(command)
        deadline = time.monotonic() + 10
        while True:
            if self.process.poll() is not None:
                log = self.directory / "pgbouncer.log"
                raise RuntimeError(
                    f"pgbouncer exited with {self.process.returncode}: "
                    f"{log.read_text() if log.exists() else '(no log)'}"
                )
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not listen on port {self.port} within 10 s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # immediate shutdown
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def direct_server() -> tuple[str, int]:
    """(host, port) of the PostgreSQL server itself, past any pooler the suite goes through."""
    from django.db import connection

    from django_workqueue.conf import workqueue_settings
    from django_workqueue.db.postgresql import listen_params

    params = listen_params(connection, workqueue_settings.LISTEN_DSN)
    return params.get("host") or "127.0.0.1", int(params.get("port") or 5432)


def console_name(database: str) -> str:
    """``database`` as the admin console's commands take it: quoted (tox's test database names
    have hyphens, which the console reads only inside double quotes)."""
    return '"' + database.replace('"', '""') + '"'


def admin(admin_url: str, command: str) -> list[dict[str, Any]]:
    """Run ``command`` on the console of the pooler at ``admin_url`` (simple protocol only);
    return the rows it shows, as dicts."""
    import psycopg
    from psycopg.rows import dict_row

    # A client-side binding cursor sends a query without parameters as a simple query.
    with psycopg.connect(
        admin_url, autocommit=True, cursor_factory=psycopg.ClientCursor, row_factory=dict_row
    ) as console:
        cursor = console.execute(command)
        return cursor.fetchall() if cursor.description else []


def release_server_connections(database: str) -> None:
    """Close the pooler's server connections to ``database`` (the test database, before it is
    dropped: PostgreSQL refuses to drop a database others are connected to). Nothing without
    the wrapper."""
    admin_url = os.environ.get(ADMIN_ENV)
    if not admin_url:
        return
    # KILL drops the database's connections and pauses it; RESUME lets new clients in again.
    admin(admin_url, f"KILL {console_name(database)}")
    admin(admin_url, f"RESUME {console_name(database)}")


def main(command: list[str]) -> int:
    url = urlsplit(os.environ["DATABASE_URL"])
    if not url.scheme.startswith("postgres"):
        raise SystemExit(f"DATABASE_URL must be a postgres:// URL, got {url.scheme}://")
    host, port = url.hostname or "127.0.0.1", url.port or 5432
    user, password = unquote(url.username or "postgres"), unquote(url.password or "")
    pooler = Pooler(host=host, port=port, user=user, password=password).start()
    try:
        env = dict(os.environ)
        env.update(
            DATABASE_URL=pooler.url(url.path.lstrip("/") or "postgres"),
            WORKQUEUE_LISTEN_DSN=f"host={host} port={port}",
            WORKQUEUE_PREPARED_STATEMENTS="false",
            DISABLE_SERVER_SIDE_CURSORS="true",
            **{ADMIN_ENV: pooler.url("pgbouncer")},
        )
        print(f"jobs traffic through PgBouncer on port {pooler.port} (transaction pooling)")
        return subprocess.call(command, env=env)
    finally:
        pooler.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

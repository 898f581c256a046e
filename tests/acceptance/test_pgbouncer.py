"""A worker whose jobs traffic goes through PgBouncer 1.18 in transaction pooling mode (its
LISTEN connection straight to the server) leaves no session state on the pooled server
connections: another client of the same pool finds PostgreSQL's defaults there. PostgreSQL only
by design (PgBouncer is a PostgreSQL pooler)."""

from __future__ import annotations

import signal

import psycopg
import pytest
from django.db import connection

from django_workqueue.models import Job
from testproject.testapp.tasks import atomic_effect, flaky, progress, record
from tests.support.pgbouncer import Pooler, admin, direct_server
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

# What a pooled server connection must show a client that set nothing itself.
STATE = (
    "SELECT pg_backend_pid(), current_setting('lock_timeout'), "
    "current_setting('application_name'), "
    "(SELECT count(*) FROM pg_prepared_statements), "
    "(SELECT count(*) FROM pg_listening_channels()), "
    "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), "
    "pg_my_temp_schema() <> 0"
)


def test_a_worker_through_pgbouncer_leaves_no_session_state_on_pooled_connections(
    small_pooler: Pooler, start_worker
):
    host, port = direct_server()
    database = connection.settings_dict["NAME"]
    with psycopg.connect(host=host, port=port, dbname=database, user="postgres") as direct:
        default_lock_timeout = direct.execute("SHOW lock_timeout").fetchone()[0]
    worker = start_worker(
        "--concurrency", "2",
        env={
            "DATABASE_URL": small_pooler.url(database),
            "WORKQUEUE_LISTEN_DSN": f"host={host} port={port}",
            "WORKQUEUE_PREPARED_STATEMENTS": "false",
            "DISABLE_SERVER_SIDE_CURSORS": "true",
        },
    )  # fmt: skip
    worker.wait_started()
    jobs = [record.enqueue(f"plain {n}") for n in range(10)]
    jobs += [progress.enqueue(3), flaky.enqueue(succeed_on=2)]
    # Two transactions that overlap (the slots run both at once): both server connections serve.
    jobs += [atomic_effect.enqueue(f"atomic {n}", sleep=1.0) for n in range(2)]
    ids = [job.pk for job in jobs]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status="succeeded").count() == len(ids),
        timeout=60, message="every job succeeded through the pooler",
    )  # fmt: skip
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.describe()

    servers = admin(small_pooler.url("pgbouncer"), "SHOW SERVERS")
    assert len([s for s in servers if s["database"] == database]) == 2  # the worker used both
    # Two clients, each in a transaction, hold both server connections at once.
    clients = [psycopg.connect(small_pooler.url(database)) for _ in range(2)]
    try:
        seen = [client.execute(STATE).fetchone() for client in clients]
    finally:
        for client in clients:
            client.close()
    assert seen[0][0] != seen[1][0]  # two server connections
    for state in seen:
        assert state[1:] == (default_lock_timeout, "", 0, 0, 0, False), state

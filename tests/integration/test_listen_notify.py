"""LISTEN/NOTIFY wake-ups of an idle worker, and the listener's reconnection.

PostgreSQL only by design: SQLite has no LISTEN/NOTIFY; its workers hear of work by polling
and by in-process wake-ups, which the worker tests cover on both databases.

The worker polls every 30 s and renews leases at most every 60 s, and the in-process wake-up
(which would wake a worker living in the enqueueing process) is switched off: a job that runs
within a few seconds was announced by NOTIFY, not found by polling.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from django.db import connection
from psycopg.conninfo import make_conninfo

from django_workqueue import wakeup
from django_workqueue.worker.runner import Worker
from testproject.testapp.tasks import add, atomic_effect, record, send_mail
from tests.support.database import fresh
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

POLL_INTERVAL = 30.0
WAKE_TIMEOUT = 8.0  # well below the poll interval, generous for a busy machine
# An idle worker also wakes for its heartbeat and its maintenance services: push them all past
# the test, so that only a NOTIFY can wake it within WAKE_TIMEOUT.
IDLE = {"HEARTBEAT_INTERVAL": 60, "PROMOTE_INTERVAL": 60, "REAPER_INTERVAL": 60,
        "SCHEDULER_INTERVAL": 60}  # fmt: skip


@pytest.fixture
def notifications(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """What the worker's listener delivered; the in-process wake-up is disabled."""
    received: list[str | None] = []
    on_notify = Worker._on_ready

    def recording(self: Worker, queue: str | None) -> None:
        received.append(queue)
        on_notify(self, queue)

    monkeypatch.setattr(Worker, "_on_ready", recording)
    monkeypatch.setattr(wakeup, "wake", lambda queues: None)
    return received


def listen_backends() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
        )
        return [row[0] for row in cursor.fetchall()]


def start_idle_worker(background_worker, notifications) -> None:
    background_worker(poll_interval=POLL_INTERVAL, concurrency=1)
    # Connected: the listener reports (None) once it listens, and its backend shows LISTEN.
    wait_until(lambda: None in notifications, timeout=10, message="the listener to connect")
    # A stopped worker's listener lets go of its backend within a second: wait for ours alone.
    wait_until(lambda: len(listen_backends()) == 1, timeout=10, message="one LISTEN backend")


@workqueue_settings(**IDLE)
def test_notify_wakes_an_idle_worker(background_worker, notifications):
    start_idle_worker(background_worker, notifications)

    for n in range(3):  # each round after the previous one: the worker is idle again
        job = add.enqueue(n, n)
        wait_until(lambda job=job: fresh(job).status == "succeeded", timeout=WAKE_TIMEOUT)
        assert fresh(job).result == 2 * n
    assert notifications.count("default") >= 3


@workqueue_settings(**{**IDLE, "PROMOTE_INTERVAL": 0.2, "MAINTENANCE_IDLE_INTERVAL": 60})
def test_a_retry_is_announced_so_the_sleeping_maintainer_promotes_it_on_time(
    background_worker, notifications
):
    # The maintainer's promoter sleeps until the earliest scheduled job it knows of (none
    # while the first attempt runs: up to MAINTENANCE_IDLE_INTERVAL). Writing the retry (due
    # after its ~2 s backoff) sends a NOTIFY, which makes the promoter look again: the second
    # attempt starts seconds later, not a minute later.
    start_idle_worker(background_worker, notifications)
    job = atomic_effect.enqueue(fail=True, sleep=1.0)

    wait_until(lambda: fresh(job).attempt >= 2, timeout=WAKE_TIMEOUT + 2)


@workqueue_settings(**IDLE)
def test_notify_for_a_queue_the_worker_does_not_serve_is_ignored(background_worker, notifications):
    background_worker(poll_interval=POLL_INTERVAL, concurrency=1, queues=["default"])
    wait_until(lambda: None in notifications, timeout=10, message="the listener to connect")

    mail = send_mail.enqueue("ada@example.com")
    job = add.enqueue(1, 2)

    wait_until(lambda: fresh(job).status == "succeeded", timeout=WAKE_TIMEOUT)
    assert "mail" in notifications
    assert (fresh(mail).status, fresh(mail).attempt) == ("ready", 0)


@workqueue_settings(**IDLE)
def test_listener_reconnects_after_its_backend_is_killed(background_worker, notifications):
    start_idle_worker(background_worker, notifications)
    [old_backend] = listen_backends()

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old_backend])
        assert cursor.fetchone()[0] is True

    new_backends = wait_until(
        lambda: [pid for pid in listen_backends() if pid != old_backend],
        timeout=15,
        message="the listener to reconnect",
    )
    assert len(new_backends) == 1
    assert old_backend not in listen_backends()
    wait_until(lambda: notifications.count(None) >= 2, timeout=10)  # it polled once on return

    job = add.enqueue(2, 3)
    wait_until(lambda: fresh(job).status == "succeeded", timeout=WAKE_TIMEOUT)
    assert fresh(job).result == 5
    assert "default" in notifications[notifications.index(None, 1) :]


@pytest.mark.postgres_direct  # its DSN is the test's own: LISTEN must reach the server itself
def test_a_listener_on_its_own_dsn_carries_the_worker_name_too(background_worker, monkeypatch):
    """A listener connected through ``LISTEN_DSN`` is named ``workqueue:<worker id>`` like the
    worker's other connections, whatever ``application_name`` the DSN gives."""
    monkeypatch.setattr(wakeup, "wake", lambda queues: None)  # only NOTIFY can wake it
    db = connection.settings_dict
    dsn = make_conninfo(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, dbname=db["NAME"],
        user=db["USER"], password=db["PASSWORD"] or None, application_name="from-the-dsn",
    )  # fmt: skip
    with workqueue_settings(LISTEN_DSN=dsn):
        worker = background_worker(concurrency=1, poll_interval=POLL_INTERVAL)

    def listener_names() -> list[str]:
        """application_name of every LISTEN backend (a listener of an earlier test's worker may
        still be closing: only this worker's must carry this worker's name)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
            )
            return [row[0] for row in cursor.fetchall()]

    name = f"workqueue:{worker.id}"
    wait_until(lambda: name in listener_names(), timeout=20, message=f"a listener named {name}")
    assert "from-the-dsn" not in listener_names()
    job = record.enqueue("woken")  # polling every 30 s: NOTIFY wakes it through that listener
    wait_until(lambda: fresh(job).status == "succeeded", timeout=WAKE_TIMEOUT)


def test_the_listener_detects_a_silently_dead_connection_within_a_minute():
    # TCP keepalives on the LISTEN connection (libpq's keepalives*), unless the settings give
    # their own: a connection a NAT dropped fails within about a minute, and the worker goes
    # back to polling every POLL_INTERVAL instead of trusting NOTIFY it can no longer hear.
    from django_workqueue.db.postgresql import listen_params

    params = listen_params(connection, None)
    assert (params["keepalives"], params["keepalives_idle"]) == (1, 30)
    assert params["keepalives_interval"] * params["keepalives_count"] <= 30

    assert listen_params(connection, "keepalives_idle=5")["keepalives_idle"] == "5"


def _standby_listener(heard: list[str | None]) -> Any:
    """A started listener with one standby slot, connected and holding the slot."""
    from django_workqueue.conf import workqueue_settings as conf
    from django_workqueue.db.postgresql import Listener, listen_params

    params = listen_params(connection, conf.LISTEN_DSN)
    listener = Listener(params, heard.append, lambda job, why: None, standbys=1)
    listener.start()
    assert listener.connected.wait(10)
    wait_until(lambda: listener.standby is not None, timeout=10, message="a standby slot")
    return listener


def test_a_stopped_listener_ends_at_once_not_at_the_end_of_its_turn(monkeypatch):
    # A worker that stops (SIGTERM, the end of a burst) waits for its listener when it holds
    # a standby slot, to give the slot up: that wait must not last the listener's turn, which
    # is made an hour here. The listener still hears notifications meanwhile.
    from django_workqueue.db import postgresql

    monkeypatch.setattr(postgresql, "LISTEN_TURN_SECONDS", 3600.0)
    heard: list[str | None] = []
    listener = _standby_listener(heard)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, 'mail')", [postgresql.CHANNEL])
        wait_until(lambda: "mail" in heard, timeout=10, message="the NOTIFY, mid-turn")
    finally:
        listener.stop()
        listener.join(timeout=30)
    assert not listener.is_alive()


def test_a_listener_stopped_while_it_gives_its_slot_up_still_says_so(monkeypatch):
    # The slot's release (an unlock and a NOTIFY, one statement) may be at the server when
    # stop() comes: stop() must not cancel it, or the NOTIFY that lets another worker take
    # the slot is never sent and the fleet keeps one watcher of its maintainer fewer.
    import psycopg

    from django_workqueue.conf import workqueue_settings as conf
    from django_workqueue.db import pg_liveness, postgresql
    from django_workqueue.db.postgresql import listen_params

    releasing, stopped = threading.Event(), threading.Event()
    release = pg_liveness.release_standby

    def slow_release(session: Any, slot: int, channel: str) -> None:
        releasing.set()
        session.execute("SELECT pg_sleep(0.5)")  # the server busy with the release
        stopped.wait(10)
        release(session, slot, channel)

    monkeypatch.setattr(postgresql, "LISTEN_TURN_SECONDS", 3600.0)
    heard: list[str | None] = []
    listener = _standby_listener(heard)
    with psycopg.connect(**listen_params(connection, conf.LISTEN_DSN), autocommit=True) as other:
        other.execute(f"LISTEN {postgresql.CHANNEL}")
        monkeypatch.setattr(pg_liveness, "release_standby", slow_release)
        try:
            listener.want_standby(False)  # gives the slot up at once: the release begins
            assert releasing.wait(10)
        finally:
            listener.stop()  # while the release's first statement runs on the server
            stopped.set()
            listener.join(timeout=30)
        assert not listener.is_alive()
        said = [n.payload for n in other.notifies(timeout=5, stop_after=1)]
    assert said == [pg_liveness.STANDBY_FREE]


def test_a_listener_whose_session_has_a_high_file_descriptor_still_hears():
    # select() refuses descriptors above 1023: a worker with many files open (a thousand
    # slots' connections) gets its listener's session there, and must still hear.
    import resource

    from django_workqueue.conf import workqueue_settings as conf
    from django_workqueue.db import postgresql
    from django_workqueue.db.postgresql import Listener, listen_params

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this machine allows {hard} open files")
    wanted = 1200 if hard == resource.RLIM_INFINITY else min(hard, 1200)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    heard: list[str | None] = []
    listener = Listener(listen_params(connection, conf.LISTEN_DSN), heard.append,
                        lambda job, why: None)  # fmt: skip
    try:
        listener.start()
        assert listener.connected.wait(10)
        assert listener.connection.fileno() > 1023
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, 'reports')", [postgresql.CHANNEL])
        wait_until(lambda: "reports" in heard, timeout=10, message="the NOTIFY")
        assert listener.connected.is_set()
    finally:
        listener.stop()
        listener.join(timeout=30)
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

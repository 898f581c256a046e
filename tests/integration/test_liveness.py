"""Liveness from the inside (``maintenance/liveness.py``, ``db/pg_liveness.py``): a worker's
token tells its death, the maintenance lease follows a gone holder, the watches hear a death,
and on PostgreSQL only ``MAINTAINER_STANDBYS`` workers keep a watch connection, a free slot
being taken after the NOTIFY that announces it."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from django_workqueue import process_identity
from django_workqueue.conf import workqueue_settings as conf
from django_workqueue.db import LivenessToken, driver_for
from django_workqueue.db.pg_liveness import STANDBY_FREE
from django_workqueue.maintenance.leadership import Leadership
from django_workqueue.maintenance.liveness import CONFIRM_SECONDS, HolderWatch, look_up
from django_workqueue.maintenance.maintainer import Maintainer
from django_workqueue.maintenance.reaper import Reaper
from django_workqueue.models import WorkerProcess
from tests.support.database import THIS_DATABASES_LOCKS, fresh, listening
from tests.support.factories import JobFactory
from tests.support.waiting import wait_until

T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's pid liveness")


def register(worker_id: str, liveness: str, pid: int | None = None) -> WorkerProcess:
    return WorkerProcess.objects.create(
        id=worker_id, host=socket.gethostname(), pid=pid or os.getpid(), concurrency=1,
        liveness=liveness,
    )  # fmt: skip


def value(token: LivenessToken | None) -> str:
    """What a worker's row shows of ``token`` (none: "")."""
    return token.value if token is not None else ""


@contextmanager
def child_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this host that runs until killed."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        wait_until(lambda: process_identity.token_of(child.pid), message="the child to start")
        yield child
    finally:
        child.kill()
        child.wait()


def watching(watch: Any, worker: Any) -> tuple[threading.Thread, list[bool]]:
    """``watch.wait_gone(worker)`` on a thread; its answer lands in the list."""
    answers: list[bool] = []
    thread = threading.Thread(target=lambda: answers.append(watch.wait_gone(worker)))
    thread.start()
    return thread, answers


# --- the lease follows a gone holder (both databases) ----------------------------------------


@pytest.mark.django_db
def test_a_lease_is_taken_over_from_its_gone_holder_at_once_and_from_nobody_else():
    a, b = (Leadership("default", "maintenance", owner=o, seconds=600) for o in "ab")
    assert a.hold(now=T0)

    assert not b.hold(now=T0, gone_holder="someone-else")  # not the holder: still a's
    assert b.hold(now=T0, gone_holder="a")  # a is gone: taken, 600 s before the expiry

    assert not a.hold(now=T0)
    assert not Leadership("default", "maintenance", owner="c", seconds=600).hold(
        now=T0, gone_holder="a"
    )  # b holds it now: a's death no longer gives it away


# --- SQLite: the pid on its one host ---------------------------------------------------------


@sqlite_only
@pytest.mark.django_db
def test_sqlite_sees_a_worker_gone_when_its_process_has_exited():
    driver = driver_for("default")
    assert value(driver.liveness_token()) == process_identity.own_token()
    register("me", value(driver.liveness_token()))
    with child_process() as child:
        register("child", process_identity.token_of(child.pid) or "", pid=child.pid)
        register("no-token", "", pid=child.pid)
        assert list(driver.gone_workers()) == []
        child.kill()
        child.wait()

        assert list(driver.gone_workers()) == ["child"]
    assert look_up("default", driver, "child").gone  # type: ignore[union-attr]
    assert not look_up("default", driver, "me").gone  # type: ignore[union-attr]


@sqlite_only
@pytest.mark.django_db
def test_the_pid_watch_returns_when_the_process_exits_or_when_interrupted():
    with child_process() as child:
        worker = look_up(
            "default", driver_for("default"),
            register("child", process_identity.token_of(child.pid) or "", child.pid).id,
        )  # fmt: skip
        watch = driver_for("default").worker_watch()
        thread, answers = watching(watch, worker)
        watch.interrupt()
        thread.join(10)
        assert answers == [False]

        thread, answers = watching(watch, worker)
        child.kill()
        thread.join(10)
    assert answers == [True]


# --- PostgreSQL: the session's advisory lock -------------------------------------------------


def direct_connection() -> Any:
    import psycopg

    from django_workqueue.db.postgresql import listen_params

    return psycopg.connect(**listen_params(connection, conf.LISTEN_DSN), autocommit=True)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_postgresql_sees_a_worker_gone_when_its_session_ends():
    from django_workqueue.db import pg_liveness

    driver = driver_for("default")
    with direct_connection() as alive, direct_connection() as dying:
        register("alive", value(pg_liveness.hold(alive)))
        register("dying", value(pg_liveness.hold(dying)))
        register("no-token", "")
        assert set(WorkerProcess.objects.filter(id__in=driver.gone_workers())) == set()
        dying.close()  # the server ends the session (and drops its lock) a moment later

        def gone() -> list[str]:
            rows = WorkerProcess.objects.filter(id__in=driver.gone_workers())
            return list(rows.values_list("id", flat=True))

        wait_until(lambda: gone() == ["dying"], message=f"only 'dying' gone (now {gone()})")
        assert gone() == ["dying"]


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_the_session_watch_returns_when_the_session_ends_or_when_interrupted():
    from django_workqueue.db import pg_liveness

    with direct_connection() as holder:
        token = value(pg_liveness.hold(holder))
        worker = look_up("default", driver_for("default"), register("h", token).id)
        watch = driver_for("default").worker_watch()
        thread, answers = watching(watch, worker)
        wait_until(lambda: watch._busy and sessions_waiting() == 1, message="the watch to wait")
        watch.interrupt()
        thread.join(10)
        assert answers == [False]

        thread, answers = watching(watch, worker)
        wait_until(lambda: sessions_waiting() == 1, message="the watch to wait")
        holder.close()
        thread.join(10)
    assert answers == [True]
    watch.close()


def sessions_waiting() -> int:
    with connection.cursor() as cursor:
        cursor.execute(  # this database's: other suites may share the server
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            + THIS_DATABASES_LOCKS
        )
        return cursor.fetchone()[0]


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_holder_watch_that_follows_nobody_keeps_no_connection():
    from django_workqueue.db import pg_liveness

    with direct_connection() as holder:
        token = value(pg_liveness.hold(holder))
        worker = look_up("default", driver_for("default"), register("h", token).id)
        session = driver_for("default").worker_watch()
        watch = HolderWatch(session, on_gone=lambda worker_id: None)
        watch.start()
        try:
            watch.follow(worker)
            wait_until(lambda: sessions_waiting() == 1, message="the watch to wait")
            watch.follow(None)  # this worker maintains now, or is no standby

            wait_until(lambda: session.connection is None, message="the connection closed")
            assert sessions_waiting() == 0
        finally:
            watch.stop()
            watch.join(10)


# --- PostgreSQL: at most MAINTAINER_STANDBYS watch -------------------------------------------


@pytest.fixture
def listeners() -> Iterator[Callable[..., Any]]:
    """Start listeners as workers do (``Driver.listener``); each is stopped at the end."""
    started: list[Any] = []

    def start(count: int, standbys: int = 2) -> list[Any]:
        from django_workqueue.db.postgresql import Listener, listen_params

        params = listen_params(connection, conf.LISTEN_DSN)
        batch = [
            Listener(params, lambda queue: None, lambda job, why: None, standbys=standbys)
            for _ in range(count)
        ]
        for listener in batch:
            listener.start()
            started.append(listener)
        for listener in batch:
            assert listener.connected.wait(10)
        return batch

    yield start
    for listener in started:
        listener.stop()
    for listener in started:
        listener.join(10)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_listener_in_doubt_shows_no_key_until_its_session_is_proven():
    import psycopg

    from django_workqueue.db import pg_liveness
    from django_workqueue.db.postgresql import Listener, listen_params

    # Its thread not started: this test takes the turns the thread would take.
    params = listen_params(connection, conf.LISTEN_DSN)
    listener = Listener(params, lambda queue: None, lambda job, why: None)
    with psycopg.connect(**params, autocommit=True) as session:
        listener.connection, listener.liveness = session, pg_liveness.hold(session)
        listener.connected.set()
        token = listener.held()
        assert token is not None and token.taken_at is not None

        listener.doubt()  # e.g. the worker's own connection was lost: was this one ended too?
        assert listener.held() is None
        listener._prove()  # its next turn: a round trip on the session
        assert listener.held() == token  # the same session: the same declaration

        listener.doubt()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [session.info.backend_pid])
        with pytest.raises(psycopg.OperationalError):  # ended: the thread would reconnect
            listener._prove()
        assert listener.held() is None


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_listener_whose_session_ended_takes_its_key_again_in_a_new_declaration(listeners):
    (listener,) = listeners(1, standbys=0)
    token = listener.held()
    with connection.cursor() as cursor:  # the server ends the session: a new one, same key
        cursor.execute("SELECT pg_terminate_backend(%s)", [listener.connection.info.backend_pid])
    wait_until(lambda: (listener.held() or token) != token, message="the key taken again")
    again = listener.held()
    assert again.value == token.value and again.taken_at > token.taken_at


def standbys_of(listeners: list[Any]) -> list[Any]:
    return [listener for listener in listeners if listener.standby is not None]


def standby_keys_held() -> int:
    from django_workqueue.db.pg_liveness import STANDBY_CLASS

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s AND objsubid = 2" + THIS_DATABASES_LOCKS,
            [STANDBY_CLASS],
        )
        return cursor.fetchone()[0]


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_of_four_workers_only_two_are_standbys(listeners):
    four = listeners(4, standbys=2)

    assert sorted(listener.standby for listener in standbys_of(four)) == [0, 1]
    assert standby_keys_held() == 2


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_stopping_standby_hands_its_slot_to_another_worker(listeners):
    four = listeners(4, standbys=2)
    leaving = standbys_of(four)[0]
    slot = leaving.standby

    leaving.stop()
    leaving.join(10)

    stayed = [listener for listener in four if listener is not leaving]
    wait_until(lambda: len(standbys_of(stayed)) == 2, message="another worker in the slot")
    assert slot in {listener.standby for listener in stayed}
    assert standby_keys_held() == 2


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_standby_that_becomes_the_maintainer_gives_its_slot_up(listeners):
    four = listeners(4, standbys=2)
    maintainer = standbys_of(four)[0]

    maintainer.want_standby(False)  # what Maintainer._check asks once it holds the lease

    wait_until(lambda: maintainer.standby is None, message="the slot given up")
    others = [listener for listener in four if listener is not maintainer]
    wait_until(lambda: len(standbys_of(others)) == 2, message="another worker in the slot")
    assert standby_keys_held() == 2


def interleaved_connection(meanwhile: Callable[[str], None]) -> Any:
    """A direct connection that calls ``meanwhile(sql)`` as each statement leaves for the
    server: what another thread does while this one waits for the statement."""
    import psycopg

    from django_workqueue.db.postgresql import listen_params

    class Interleaved(psycopg.Connection):  # type: ignore[type-arg]
        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            meanwhile(str(query))
            return super().execute(query, *args, **kwargs)

    return Interleaved.connect(**listen_params(connection, conf.LISTEN_DSN), autocommit=True)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_slot_unwished_while_the_listener_takes_it_is_given_up_at_its_next_turn():
    """A worker takes the maintenance lease (and gives its slot up) while its listener, just
    connected, is taking a slot: the slot it ends that turn with is given up at the next,
    or the maintainer would keep a slot that no other worker can watch it from."""
    from django_workqueue.db.postgresql import Listener

    # Not started: the test plays the listener's turns on a session of its own.
    listener = Listener({}, lambda queue: None, lambda job, why: None, standbys=1)

    def lease_taken_meanwhile(sql: str) -> None:
        if "pg_try_advisory_lock" in sql:  # the take of a slot, at the server
            listener.want_standby(False)  # what Maintainer._check asks once it holds the lease

    with interleaved_connection(lease_taken_meanwhile) as session:
        listener.connection = session
        listener.want_standby(True)
        listener._tend_standby(listening=False)
        assert listener.standby == 0  # taken, though no longer wished

        listener._tend_standby(listening=False)  # its next turn

        assert listener.standby is None
        assert standby_keys_held() == 0


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_dead_standbys_slot_is_taken_after_the_notify_that_announces_it(listeners):
    from django_workqueue.db import pg_liveness

    with direct_connection() as dead:  # a standby that will be SIGKILLed: no word on its way out
        assert pg_liveness.take_standby(dead, 2) == 0
        three = listeners(3, standbys=2)
        assert [listener.standby for listener in standbys_of(three)] == [1]
    # Its slot is free (once its backend has ended: a close is not waited for); nobody polls.
    wait_until(lambda: standby_keys_held() == 1, timeout=10, message="the dead standby's slot")

    driver_for("default").notify_standby_free()  # as the maintainer that finds a dead worker

    wait_until(lambda: len(standbys_of(three)) == 2, message="a worker in the free slot")
    assert sorted(listener.standby for listener in standbys_of(three)) == [0, 1]


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_the_reaper_announces_a_free_slot_when_it_reaps_a_dead_workers_jobs():
    from django_workqueue.db import pg_liveness

    with direct_connection() as dead:
        register("dead", value(pg_liveness.hold(dead)))
    far = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    job = JobFactory(running=True, lease_owner="dead", lease_expires_at=far)

    with listening() as listener:
        assert Reaper("default", 1.0).run_once() == 1
        heard = [n.payload for n in listener.notifies(timeout=5, stop_after=2)]

    assert fresh(job).status == "ready"
    assert STANDBY_FREE in heard


# --- the maintainer: a watch only for a standby (both databases) ------------------------------


def maintainer(owner: str, standby: bool, asked: list[bool]) -> Maintainer:
    return Maintainer(
        "default", owner, listening=lambda: False, standby=lambda: standby,
        stand_by=asked.append,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_only_a_standby_watches_the_maintainer_and_the_maintainer_gives_its_slot_up():
    driver = driver_for("default")
    holder_asked: list[bool] = []
    holder = maintainer("holder", standby=True, asked=holder_asked)
    if connection.vendor == "postgresql":
        from django_workqueue.db import pg_liveness

        session = direct_connection()
        register("holder", value(pg_liveness.hold(session)))
    else:
        register("holder", value(driver.liveness_token()))
    idle = maintainer("idle", standby=False, asked=[])
    standby = maintainer("standby", standby=True, asked=[])
    try:
        holder.run_if_due()
        assert holder.leading and holder_asked == [False]  # its slot is another worker's now

        idle.run_if_due()
        standby.run_if_due()

        assert not idle.leading and not standby.leading
        assert idle._watch is None  # no standby: no watch, no connection
        assert standby._watch is not None and standby._watch.following.id == "holder"
    finally:
        for each in (holder, idle, standby):
            each.release()
        if connection.vendor == "postgresql":
            session.close()


@pytest.mark.django_db(transaction=True)
def test_a_holder_seen_before_it_shows_its_token_is_looked_at_again_soon():
    """A worker just started holds the lease before its LISTEN connection shows its token: a
    standby that read it then looks again within a moment, not when the lease runs out."""
    from django_workqueue.maintenance.maintainer import LEASE_NAME

    assert Leadership("default", LEASE_NAME, owner="holder", seconds=600).hold()
    register("holder", "")  # no token yet
    standby = maintainer("standby", standby=True, asked=[])
    session = direct_connection() if connection.vendor == "postgresql" else None
    try:
        at = time.monotonic()
        standby.run_if_due(at=at)
        assert not standby.leading
        assert standby.next_check - at <= 1.5  # 0.5 s and a jitter of at most 1 s, not ~600 s

        if session is not None:
            from django_workqueue.db import pg_liveness

            token = value(pg_liveness.hold(session))
        else:
            token = value(driver_for("default").liveness_token())
        WorkerProcess.objects.filter(id="holder").update(liveness=token)
        standby.run_if_due(at=standby.next_check)

        assert standby._watch is not None and standby._watch.following.liveness == token
    finally:
        standby.release()
        if session is not None:
            session.close()


@pytest.mark.django_db(transaction=True)
def test_a_worker_without_a_standby_slot_looks_at_a_holder_without_a_token_at_its_lease_end():
    """Only a standby looks again soon at a holder that shows no token yet (for its watch):
    another worker has no watch to set up, and a look of its own just after the holder died
    would race the standby's watch for the takeover. It comes back when the lease runs out."""
    from django_workqueue.maintenance.maintainer import LEASE_NAME

    assert Leadership("default", LEASE_NAME, owner="holder", seconds=600).hold()
    register("holder", "")  # no token yet
    idle = maintainer("idle", standby=False, asked=[])
    try:
        at = time.monotonic()
        idle.run_if_due(at=at)

        assert not idle.leading
        assert idle.next_check - at >= 590  # the lease's end, not 0.5 s
    finally:
        idle.release()


# --- the fleet's reaper: a death is confirmed before the jobs are taken back ------------------


def seen_gone(worker_id: str) -> bool:
    gone = WorkerProcess.objects.filter(id__in=driver_for("default").gone_workers())
    return gone.filter(id=worker_id).exists()


def fleets_reaper() -> Reaper:
    """The reaper as the maintenance lease's holder runs it."""
    return maintainer("maintainer", standby=False, asked=[]).reaper


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_session_the_server_ended_keeps_its_jobs_when_it_takes_its_key_again():
    """pg_terminate_backend (or an operator closing connections) ends a live worker's LISTEN
    session: its key is free until its listener reconnects and takes it again, a moment later.
    Its jobs must not be reaped as a dead worker's in that moment (they would run twice)."""
    from django_workqueue.db import pg_liveness

    with direct_connection() as first:
        key = value(pg_liveness.hold(first))
        register("alive", key)
    far = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    job = JobFactory(running=True, lease_owner="alive", lease_expires_at=far)
    reaper = fleets_reaper()
    wait_until(lambda: seen_gone("alive"), message="the server to end the session")

    assert reaper.run_once() == 0  # seen gone once: not yet a death
    with direct_connection() as again:  # the worker's listener is back
        assert value(pg_liveness.hold(again, key)) == key
        assert not seen_gone("alive")
        assert reaper.run_once() == 0
        assert fresh(job).status == "running"


@pytest.mark.django_db(transaction=True)
def test_the_fleets_reaper_takes_a_dead_workers_jobs_back_once_its_death_is_confirmed():
    far = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    job = JobFactory(running=True, lease_owner="dead", lease_expires_at=far)
    if connection.vendor == "postgresql":
        from django_workqueue.db import pg_liveness

        with direct_connection() as session:
            register("dead", value(pg_liveness.hold(session)))
    else:
        with child_process() as child:
            register("dead", process_identity.token_of(child.pid) or "", pid=child.pid)
    wait_until(lambda: seen_gone("dead"), message="the worker's death to show")
    reaper = fleets_reaper()

    at = time.monotonic()
    assert reaper.run_once() == 0  # seen gone once: confirmed CONFIRM_SECONDS later
    assert reaper.next_run <= at + CONFIRM_SECONDS + 0.1  # it looks again then, not later
    wait_until(lambda: reaper.run_once() == 1, timeout=30, message="the jobs to be reaped")
    assert time.monotonic() - at >= CONFIRM_SECONDS
    assert fresh(job).status == "ready"
    # A one-shot reap (the command line's, a test's) takes what it sees gone at once.
    job = JobFactory(running=True, lease_owner="dead", lease_expires_at=far)
    assert Reaper("default", 1.0).run_once() == 1

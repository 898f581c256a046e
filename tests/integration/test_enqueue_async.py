"""Enqueue from async code: ``aenqueue``, ``aenqueue_many`` and ``Composition.aenqueue``, which
transaction they join, that the event loop runs on while they wait for the database, and an
async view enqueueing under Django's ``AsyncClient``.

The coroutines run under ``async_to_sync`` as in the rest of the suite: the thread-sensitive
work of ``sync_to_async`` then runs on the test's own thread and connection, as it runs on a
request's thread under an ASGI server. What another connection sees is read on a fresh thread.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.exceptions import SynchronousOnlyOperation
from django.db import connection, connections, transaction
from django.db.backends.signals import connection_created
from django.test import AsyncClient, override_settings

from django_workqueue import wakeup
from django_workqueue.exceptions import InvalidArguments, PayloadTooLarge
from django_workqueue.models import Job, Workflow
from django_workqueue.states import Status
from django_workqueue.workflow import chain
from testproject.demo.tasks import send_receipt
from testproject.testapp.tasks import add, send_mail
from tests.support.database import listening
from tests.support.users import user_with

INSERT = re.compile(r"\bINSERT\s+INTO\b", re.IGNORECASE)


class Rollback(Exception):
    pass


def seen_elsewhere(pk: int | None) -> bool:
    """Whether a job row is visible to another connection (a fresh thread's): committed."""
    box: dict[str, bool] = {}

    def read() -> None:
        try:
            box["seen"] = Job.objects.filter(pk=pk).exists()
        finally:
            connections.close_all()

    thread = threading.Thread(target=read)
    thread.start()
    thread.join(30)
    assert "seen" in box, "the other connection did not answer"
    return box["seen"]


@pytest.fixture
def wake_event() -> Iterator[Callable[[str], threading.Event]]:
    """An in-process wake-up event for a queue, as a worker in this process registers."""
    registered: list[threading.Event] = []

    def register(queue: str) -> threading.Event:
        event = threading.Event()
        wakeup.register(event, [queue])
        registered.append(event)
        return event

    yield register
    for event in registered:
        wakeup.unregister(event)


def notifications_until(listener: Any, last: str) -> list[str]:
    """Payloads received, in order, up to and including ``last`` (or a 10 s timeout)."""
    received: list[str] = []
    for notice in listener.notifies(timeout=10):
        received.append(notice.payload)
        if notice.payload == last:
            break
    return received


# --- the event loop runs on -------------------------------------------------------------------


@contextmanager
def job_table_locked() -> Iterator[threading.Event]:
    """Another session holds a lock that every INSERT of a job waits for (SQLite: the write
    lock of ``BEGIN IMMEDIATE``; PostgreSQL: ``LOCK TABLE … IN SHARE MODE``) until the yielded
    event is set. After 10 s (within SQLite's 20 s busy timeout of the test settings) it gives
    up by itself, so a blocked event loop fails the test's assertion instead of hanging it."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():  # BEGIN IMMEDIATE on SQLite (the test settings)
                if connection.vendor == "postgresql":
                    with connection.cursor() as cursor:
                        cursor.execute(f"LOCK TABLE {Job._meta.db_table} IN SHARE MODE")
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10), "the lock was not taken"
    try:
        yield release
    finally:
        release.set()
        thread.join(30)


@contextmanager
def announcing_inserts() -> Iterator[threading.Event]:
    """The yielded event is set when any connection of this process (this thread's, or one
    opened meanwhile on any thread) starts an INSERT."""
    reached = threading.Event()

    def announce(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if INSERT.search(sql):
            reached.set()
        return execute(sql, params, many, context)

    def instrument(sender: Any, connection: Any, **kwargs: Any) -> None:
        connection.execute_wrappers.append(announce)

    connection.execute_wrappers.append(announce)
    connection_created.connect(instrument)
    try:
        yield reached
    finally:
        connection_created.disconnect(instrument)
        connection.execute_wrappers.remove(announce)


@pytest.mark.django_db(transaction=True)
def test_the_event_loop_runs_on_while_aenqueue_waits_for_a_lock():
    async def scenario(
        release: threading.Event, reached_insert: threading.Event
    ) -> tuple[bool, bool, Job]:
        enqueue = asyncio.ensure_future(add.aenqueue(1, 2))
        # Another coroutine of the same loop: it runs while the INSERT waits for the lock,
        # and it is what lets the INSERT finish. An aenqueue that blocked the loop would
        # keep it from running until the lock gave up by itself.
        reached = await asyncio.to_thread(reached_insert.wait, 20)
        still_waiting = not enqueue.done()
        release.set()
        return reached, still_waiting, await enqueue

    with job_table_locked() as release, announcing_inserts() as reached_insert:
        reached, still_waiting, job = async_to_sync(scenario)(release, reached_insert)
    assert reached, "the INSERT never started"
    assert still_waiting, "the enqueue had finished before another coroutine could run"
    assert Job.objects.get(pk=job.pk).args == [1, 2]


# --- what it enqueues ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_aenqueue_through_using_honours_the_options():
    async def scenario() -> tuple[Job, Job, Job, Job]:
        first = await add.using(unique_key="k", priority=7).aenqueue(1, 2)
        again = await add.using(unique_key="k").aenqueue(3, 4)
        later = await add.using(delay=3600, queue="low").aenqueue(5, 6)
        after = await add.using(depends_on=[first], run_if="all_finished").aenqueue(7, 8)
        return first, again, later, after

    first, again, later, after = async_to_sync(scenario)()
    first.refresh_from_db()
    assert (first.priority, first.unique_key, first.duplicate) == (7, "k", False)
    assert (again.pk, again.duplicate) == (first.pk, True)
    later.refresh_from_db()
    assert (later.status, later.queue) == (Status.SCHEDULED, "low")
    assert (later.run_after - later.enqueued_at).total_seconds() == pytest.approx(3600, abs=1)
    after.refresh_from_db()
    assert (after.status, after.waiting_on, after.run_condition) == (
        Status.BLOCKED,
        1,
        "all_finished",
    )
    assert after.workflow_id is not None
    assert Job.objects.get(pk=first.pk).workflow_id == after.workflow_id


@pytest.mark.django_db(transaction=True)
def test_aenqueue_raises_the_errors_of_enqueue_in_the_awaiting_coroutine():
    def sync_error(call: Callable[[], Any]) -> BaseException:
        with pytest.raises(Exception) as raised:
            call()
        return raised.value

    async def bad_arguments() -> None:
        await add.aenqueue(1, 2, 3)  # type: ignore[call-arg]

    async def too_large() -> None:
        await send_mail.aenqueue("x" * 2000)

    async def caught(scenario: Callable[[], Any]) -> BaseException:
        try:
            await scenario()
        except Exception as exc:  # the coroutine itself sees it
            return exc
        raise AssertionError("no error")

    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "MAX_PAYLOAD_BYTES": 1000}):
        wrong = async_to_sync(caught)(bad_arguments)
        large = async_to_sync(caught)(too_large)
        assert isinstance(wrong, InvalidArguments)
        assert str(wrong) == str(sync_error(lambda: add.enqueue(1, 2, 3)))  # type: ignore[call-arg]
        assert isinstance(large, PayloadTooLarge)
        assert str(large) == str(sync_error(lambda: send_mail.enqueue("x" * 2000)))
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_plain_enqueue_on_the_event_loop_is_refused_by_django():
    async def scenario() -> None:
        add.enqueue(1, 2)

    with pytest.raises(SynchronousOnlyOperation):
        async_to_sync(scenario)()
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_aenqueue_many_stores_every_job_in_call_order():
    jobs = async_to_sync(add.aenqueue_many)([((1, 2), {}), ((3, 4), {}), ((5, 6), {}, "k")])
    stored = Job.objects.order_by("pk")
    assert [job.pk for job in jobs] == [job.pk for job in stored]
    assert [job.args for job in stored] == [[1, 2], [3, 4], [5, 6]]
    assert stored.last().unique_key == "k"
    assert seen_elsewhere(jobs[0].pk)


@pytest.mark.django_db(transaction=True)
def test_a_workflow_enqueued_with_await_is_written_whole():
    workflow = async_to_sync(chain(add.s(1, 2), add.s(3)).aenqueue)(name="sums")
    assert Workflow.objects.get(pk=workflow.pk).name == "sums"
    statuses = list(Job.objects.filter(workflow=workflow).order_by("pk").values_list("status"))
    assert statuses == [(Status.READY,), (Status.BLOCKED,)]


# --- transactions -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_in_async_code_the_job_is_committed_when_the_await_returns(wake_event):
    woken = wake_event("default")

    async def scenario() -> tuple[bool, bool]:
        job = await add.aenqueue(1, 2)
        seen = await sync_to_async(seen_elsewhere, thread_sensitive=False)(job.pk)
        return seen, woken.is_set()

    seen, was_woken = async_to_sync(scenario)()
    assert seen, "the job was not committed when the await returned"
    assert was_woken, "a worker of this process was not woken when the await returned"


@pytest.mark.postgres_only  # LISTEN/NOTIFY exists only on PostgreSQL; SQLite workers poll.
@pytest.mark.django_db(transaction=True)
def test_in_async_code_the_notify_is_sent_when_the_await_returns():
    with listening() as listener:
        async_to_sync(send_mail.aenqueue)("a@example.com")
        assert notifications_until(listener, "mail") == ["mail"]


def place_order(fail: bool, woken: threading.Event) -> dict[str, Any]:
    """Sync code run from async code with ``sync_to_async``: a plain ``enqueue`` inside its
    ``atomic()`` block, where an order's writes would be; what was true inside it."""
    seen: dict[str, Any] = {}
    with transaction.atomic():
        job = send_mail.enqueue("a@example.com")
        seen["pk"] = job.pk
        seen["visible inside"] = Job.objects.filter(pk=job.pk).exists()
        seen["committed inside"] = seen_elsewhere(job.pk)
        seen["woken inside"] = woken.is_set()
        # PostgreSQL: a marker job enqueued and committed by another session while this block
        # is open (on SQLite it would wait for this block's write lock).
        if connection.vendor == "postgresql":
            _marker_in_another_session()
        if fail:
            raise Rollback
    return seen


def _marker_in_another_session() -> None:
    thread = threading.Thread(target=_enqueue_marker)
    thread.start()
    thread.join(30)


def _enqueue_marker() -> None:
    try:
        add.using(queue="low").enqueue(0, 0)
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_enqueue_in_a_sync_to_async_atomic_block_commits_with_it(wake_event):
    woken = wake_event("mail")

    async def scenario() -> tuple[dict[str, Any], bool]:
        seen = await sync_to_async(place_order, thread_sensitive=True)(False, woken)
        return seen, woken.is_set()

    seen, woken_after = async_to_sync(scenario)()
    assert seen["visible inside"] and not seen["committed inside"]
    assert not seen["woken inside"], "a worker was woken before the commit"
    assert woken_after
    assert seen_elsewhere(seen["pk"])


@pytest.mark.django_db(transaction=True)
def test_enqueue_in_a_sync_to_async_atomic_block_rolls_back_with_it(wake_event):
    woken = wake_event("mail")

    async def scenario() -> None:
        await sync_to_async(place_order, thread_sensitive=True)(True, woken)

    with pytest.raises(Rollback):
        async_to_sync(scenario)()
    assert not Job.objects.filter(queue="mail").exists()
    assert not woken.is_set()


@pytest.mark.postgres_only  # LISTEN/NOTIFY exists only on PostgreSQL; SQLite workers poll.
@pytest.mark.django_db(transaction=True)
def test_the_notify_of_a_sync_to_async_atomic_block_is_sent_at_its_commit(wake_event):
    woken = wake_event("mail")
    with listening() as listener:
        async_to_sync(sync_to_async(place_order, thread_sensitive=True))(False, woken)
        # The marker committed while the block was open; the block's NOTIFY comes after it.
        assert notifications_until(listener, "mail") == ["low", "mail"]


@pytest.mark.postgres_only  # LISTEN/NOTIFY exists only on PostgreSQL; SQLite workers poll.
@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_sync_to_async_atomic_block_sends_no_notify(wake_event):
    woken = wake_event("mail")
    with listening() as listener:
        with pytest.raises(Rollback):
            async_to_sync(sync_to_async(place_order, thread_sensitive=True))(True, woken)
        add.using(queue="reports").enqueue(0, 0)  # a later marker: nothing came before it
        assert notifications_until(listener, "reports") == ["low", "reports"]


@pytest.mark.django_db(transaction=True)
def test_aenqueue_called_from_sync_code_inside_atomic_joins_that_block():
    # A sync caller (a sync view, ATOMIC_REQUESTS) that calls async code with async_to_sync:
    # thread-sensitive work comes back to the caller's thread, into its open transaction.
    with pytest.raises(Rollback), transaction.atomic():
        job = async_to_sync(add.aenqueue)(1, 2)
        assert Job.objects.filter(pk=job.pk).exists()
        assert not seen_elsewhere(job.pk)
        raise Rollback
    assert not Job.objects.filter(pk=job.pk).exists()


# --- an async view under AsyncClient ------------------------------------------------------------


@pytest.fixture
def shop_client(fast_passwords: None) -> AsyncClient:
    client = AsyncClient()
    client.force_login(user_with(username="clerk"))
    return client


def post_receipt(client: AsyncClient, **data: Any) -> Any:
    return async_to_sync(client.post)("/demo/receipts/", data)


@pytest.mark.django_db(transaction=True)
def test_an_async_view_enqueues_and_the_job_is_committed_by_its_response(shop_client):
    response = post_receipt(shop_client, order_id="42", email="ada@example.com")
    assert response.status_code == 201
    job = Job.objects.get(pk=response.json()["job"])
    assert (job.task_name, job.queue) == (send_receipt.name, "mail")
    assert job.args == [42, "ada@example.com"]
    assert seen_elsewhere(job.pk)


@pytest.mark.django_db(transaction=True)
def test_an_async_view_repeated_returns_the_waiting_job(shop_client):
    first = post_receipt(shop_client, order_id="42", email="ada@example.com")
    again = post_receipt(shop_client, order_id="42", email="ada@example.com")
    assert again.status_code == 200
    assert again.json() == {"job": first.json()["job"], "duplicate": True}
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_async_view_refuses_bad_input_and_writes_nothing(shop_client):
    response = post_receipt(shop_client, order_id="forty-two", email="ada@example.com")
    assert response.status_code == 400
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_atomic_requests_refuses_an_async_view(shop_client, monkeypatch):
    # Django does not wrap async views in ATOMIC_REQUESTS' transaction: it refuses them
    # (BaseHandler.make_view_atomic), unless the view is marked non_atomic_requests.
    monkeypatch.setitem(connections.settings["default"], "ATOMIC_REQUESTS", True)
    with pytest.raises(RuntimeError, match="ATOMIC_REQUESTS with async views"):
        post_receipt(shop_client, order_id="42", email="ada@example.com")
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_an_async_view_needs_a_login_and_writes_nothing_without_one():
    response = post_receipt(AsyncClient(), order_id="42", email="ada@example.com")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert Job.objects.count() == 0

"""Enqueue: validation, transactional insert, bulk insert, unique keys and wake-ups."""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models.functions import Now
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_workqueue import registry, wakeup
from django_workqueue.exceptions import (
    EnqueueError,
    InvalidOption,
    InvalidPriority,
    NaiveDatetime,
    PayloadNotJSON,
    PayloadTooLarge,
    TaskNotRegistered,
    UnknownQueue,
)
from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import add, send_mail
from tests.support.database import db_now, listening

ADD = "testproject.testapp.tasks.add"
SEND_MAIL = "testproject.testapp.tasks.send_mail"
INSERT = re.compile(r"\bINSERT\s+INTO\b", re.IGNORECASE)


class Rollback(Exception):
    pass


def in_other_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a fresh thread, which has its own database connection; return its result."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the test
            box["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the other connection hung"
    if "error" in box:
        raise box["error"]
    return box["value"]


# --- what enqueue stores ------------------------------------------------------------------------


@pytest.mark.django_db
def test_enqueue_returns_a_saved_ready_job_with_the_task_fields():
    job = send_mail.enqueue("a@example.com", subject="hi")
    assert isinstance(job, Job)
    assert job.pk is not None
    stored = Job.objects.get(pk=job.pk)
    assert stored.task_name == "testproject.testapp.tasks.send_mail"
    assert (stored.queue, stored.priority) == ("mail", 5)
    assert (stored.args, stored.kwargs) == (["a@example.com"], {"subject": "hi"})
    assert (stored.status, stored.attempt) == (Status.READY, 0)
    assert (stored.max_attempts, stored.lease_seconds) == (3, 60)
    assert (stored.unique_key, stored.deadline, stored.lease_owner) == (None, None, None)
    assert stored.errors == []
    assert stored.result is None
    assert job.duplicate is False


@pytest.mark.django_db
def test_the_returned_job_carries_the_database_times():
    job = add.enqueue(1, 2)
    stored = Job.objects.get(pk=job.pk)
    assert isinstance(job.enqueued_at, dt.datetime)
    assert (job.enqueued_at, job.run_after) == (stored.enqueued_at, stored.run_after)
    assert stored.run_after == stored.enqueued_at  # due at once


@pytest.mark.django_db
def test_using_overrides_the_task_options():
    job = add.using(
        queue="reports", priority=-7, max_attempts=9, lease_seconds=15, unique_key="report-1"
    ).enqueue(1, b=2)
    stored = Job.objects.get(pk=job.pk)
    assert (stored.queue, stored.priority) == ("reports", -7)
    assert (stored.max_attempts, stored.lease_seconds) == (9, 15)
    assert stored.unique_key == "report-1"
    assert (stored.args, stored.kwargs) == ([1], {"b": 2})


@pytest.mark.django_db
@pytest.mark.parametrize("priority", [-100, 100, 0])
def test_priority_bounds_are_inclusive(priority):
    job = add.using(priority=priority).enqueue(1, 2)
    assert Job.objects.get(pk=job.pk).priority == priority


# --- the database clock -------------------------------------------------------------------------

# A host clock a day off: anything computed from it would land a day away from the database's.
SKEWED = timezone.now() + dt.timedelta(days=1)


@pytest.mark.django_db
@pytest.mark.parametrize("delay", [90, 2.5, dt.timedelta(minutes=5)])
def test_delay_is_added_to_the_database_clock(delay):
    expected = delay if isinstance(delay, dt.timedelta) else dt.timedelta(seconds=delay)
    with mock.patch("django.utils.timezone.now", return_value=SKEWED):
        job = add.using(delay=delay).enqueue(1, 2)
    stored = Job.objects.get(pk=job.pk)
    # Both times come from the database's now() in the same INSERT.
    assert stored.run_after - stored.enqueued_at == expected
    assert abs(stored.enqueued_at - db_now()) < dt.timedelta(minutes=5)
    assert job.run_after == stored.run_after


@pytest.mark.django_db
@pytest.mark.parametrize("deadline", [600, dt.timedelta(hours=2)])
def test_a_relative_deadline_is_added_to_the_database_clock(deadline):
    expected = deadline if isinstance(deadline, dt.timedelta) else dt.timedelta(seconds=deadline)
    with mock.patch("django.utils.timezone.now", return_value=SKEWED):
        job = add.using(deadline=deadline).enqueue(1, 2)
    stored = Job.objects.get(pk=job.pk)
    assert stored.deadline - stored.enqueued_at == expected
    assert job.deadline == stored.deadline


@pytest.mark.django_db
def test_run_at_and_an_absolute_deadline_are_stored_as_given():
    run_at = dt.datetime(2031, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    deadline = dt.datetime(2031, 1, 3, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    job = add.using(run_at=run_at, deadline=deadline).enqueue(1, 2)
    stored = Job.objects.get(pk=job.pk)
    assert (stored.run_after, stored.deadline) == (run_at, deadline)


@pytest.mark.django_db
def test_a_delayed_job_is_not_due_yet():
    soon = add.enqueue(1, 2)
    later = add.using(delay=3600).enqueue(1, 2)
    due = set(Job.objects.filter(run_after__lte=Now()).values_list("pk", flat=True))
    assert soon.pk in due
    assert later.pk not in due


@pytest.mark.django_db
def test_enqueue_many_computes_delay_and_deadline_on_the_database_clock():
    with mock.patch("django.utils.timezone.now", return_value=SKEWED):
        jobs = add.using(delay=60, deadline=120).enqueue_many([((1, 2), {}), ((3, 4), {})])
    stored = Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk")
    assert [j.run_after - j.enqueued_at for j in stored] == [dt.timedelta(seconds=60)] * 2
    assert [j.deadline - j.enqueued_at for j in stored] == [dt.timedelta(seconds=120)] * 2
    assert [(j.run_after, j.deadline) for j in jobs] == [(j.run_after, j.deadline) for j in stored]


# --- transactional enqueue ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_job_enqueued_in_a_rolled_back_transaction_never_exists():
    with pytest.raises(Rollback), transaction.atomic():
        job = add.enqueue(1, 2)
        assert Job.objects.filter(pk=job.pk).exists()  # visible to its own transaction
        raise Rollback
    assert not Job.objects.filter(pk=job.pk).exists()
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_savepoint_drops_its_job_and_the_outer_commit_keeps_the_others():
    with transaction.atomic():
        before = add.enqueue(1, 1)
        with pytest.raises(Rollback), transaction.atomic():
            dropped = add.enqueue(2, 2)
            raise Rollback
        after = add.enqueue(3, 3)
    stored = {pk: args for pk, args in Job.objects.values_list("pk", "args")}
    assert stored == {before.pk: [1, 1], after.pk: [3, 3]}
    assert dropped.args not in stored.values()  # (SQLite may reuse the rolled-back pk)


@pytest.mark.django_db(transaction=True)
def test_a_job_is_invisible_to_other_connections_until_commit():
    def seen(pk: int) -> bool:
        return in_other_thread(lambda: Job.objects.filter(pk=pk).exists())

    with transaction.atomic():
        job = add.enqueue(1, 2)
        assert Job.objects.filter(pk=job.pk).exists()
        assert seen(job.pk) is False
    assert seen(job.pk) is True


@pytest.mark.django_db(transaction=True)
def test_a_job_enqueued_in_autocommit_is_visible_at_once():
    job = add.enqueue(1, 2)
    assert in_other_thread(lambda: Job.objects.filter(pk=job.pk).exists()) is True


# --- enqueue_many -------------------------------------------------------------------------------


def insert_statements(queries: CaptureQueriesContext) -> list[str]:
    """The captured statements that insert rows (also as part of a WITH … INSERT)."""
    return [q["sql"] for q in queries.captured_queries if INSERT.search(q["sql"])]


@pytest.mark.django_db
def test_enqueue_many_inserts_every_job_in_one_statement():
    calls = [((n, n), {}) for n in range(20)] + [([1], {"b": 2})]
    with CaptureQueriesContext(connection) as queries:
        jobs = add.using(priority=3).enqueue_many(calls)
    assert len(insert_statements(queries)) == 1
    assert len(jobs) == 21
    assert all(j.pk is not None for j in jobs)
    assert all(j.duplicate is False for j in jobs)
    stored = {j.pk: j for j in Job.objects.all()}
    assert set(stored) == {j.pk for j in jobs}
    assert [stored[j.pk].args for j in jobs[:3]] == [[0, 0], [1, 1], [2, 2]]
    assert (stored[jobs[-1].pk].args, stored[jobs[-1].pk].kwargs) == ([1], {"b": 2})
    assert {j.priority for j in stored.values()} == {3}
    assert {j.status for j in stored.values()} == {Status.READY}


@pytest.mark.django_db
def test_enqueue_many_of_many_jobs_is_still_one_insert_and_keeps_call_order():
    with CaptureQueriesContext(connection) as queries:
        jobs = add.enqueue_many([((n, 0), {}) for n in range(500)])
    assert len(insert_statements(queries)) == 1
    assert len({j.pk for j in jobs}) == 500
    stored = dict(Job.objects.values_list("pk", "args"))
    # each returned job is the row of its own call
    assert [stored[j.pk] for j in jobs] == [[n, 0] for n in range(500)]
    assert [j.args for j in jobs] == [[n, 0] for n in range(500)]


@pytest.mark.django_db
def test_enqueue_many_accepts_any_iterable_of_pairs():
    jobs = add.enqueue_many(((n,), {"b": n}) for n in range(3))
    assert sorted(Job.objects.values_list("kwargs", flat=True), key=lambda k: k["b"]) == [
        {"b": 0}, {"b": 1}, {"b": 2},
    ]  # fmt: skip
    assert len(jobs) == 3


@pytest.mark.django_db
def test_enqueue_many_of_nothing_writes_nothing():
    with CaptureQueriesContext(connection) as queries:
        assert add.enqueue_many([]) == []
    assert queries.captured_queries == []


# --- validation: nothing is written -------------------------------------------------------------


@pytest.fixture
def nothing_written(db):
    """Assert that the test's failed enqueue wrote no row."""
    yield
    assert Job.objects.count() == 0


def test_an_unregistered_task_name_is_refused(nothing_written):
    with pytest.raises(TaskNotRegistered) as raised:
        registry.get_task("billing.tasks.charge").enqueue(1)
    assert "no task is registered as 'billing.tasks.charge'" in str(raised.value)
    assert isinstance(raised.value, EnqueueError)


def test_a_task_fetched_by_name_enqueues(db):
    job = registry.get_task(ADD).enqueue(4, 5)
    assert Job.objects.get(pk=job.pk).task_name == ADD


def test_non_json_args_name_the_argument_path(nothing_written):
    with pytest.raises(PayloadNotJSON) as raised:
        add.enqueue(1, [2, {3}])
    assert str(raised.value).startswith(f"{ADD}: args[1][1] is a builtins.set, not JSON")


def test_non_json_kwargs_name_the_keyword_and_hint_the_fix(nothing_written):
    when = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    with pytest.raises(PayloadNotJSON) as raised:
        send_mail.enqueue("a@example.com", subject={"when": when})
    assert str(raised.value) == (
        "testproject.testapp.tasks.send_mail: kwargs['subject']['when'] is a datetime.datetime, "
        "not JSON (pass value.isoformat()). Job arguments and results are stored as JSON only."
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_and_infinity_are_refused(nothing_written, bad):
    with pytest.raises(PayloadNotJSON, match=r"args\[0\] is (nan|inf)"):
        add.enqueue(bad, 1)


def test_a_circular_argument_is_refused(nothing_written):
    looped: list = []
    looped.append(looped)
    with pytest.raises(PayloadNotJSON, match=r"args\[0\]\[0\] refers back"):
        add.enqueue(looped, 1)


def test_non_string_dict_keys_are_refused(nothing_written):
    with pytest.raises(PayloadNotJSON, match=r"kwargs\['b'\] has the key 1 of type int"):
        add.enqueue(1, b={1: "one"})


# send_mail("xxx…") encodes args as '["' + n * "x" + '"]' (n + 4 bytes), kwargs as '{}' (2 bytes).
OVERHEAD = 6


@override_settings(WORKQUEUE={**settings.WORKQUEUE, "MAX_PAYLOAD_BYTES": 1000})
def test_a_payload_of_exactly_the_limit_is_accepted(db):
    job = send_mail.enqueue("x" * (1000 - OVERHEAD))
    assert len(Job.objects.get(pk=job.pk).args[0]) == 1000 - OVERHEAD


@override_settings(WORKQUEUE={**settings.WORKQUEUE, "MAX_PAYLOAD_BYTES": 1000})
def test_a_payload_one_byte_over_the_limit_is_refused(nothing_written):
    with pytest.raises(PayloadTooLarge) as raised:
        send_mail.enqueue("x" * (1001 - OVERHEAD))
    assert str(raised.value) == (
        f"args of {SEND_MAIL} are 1,001 bytes; the limit is 1,000 bytes "
        f"(WORKQUEUE['MAX_PAYLOAD_BYTES']). Store large data elsewhere and pass a reference."
    )


@override_settings(WORKQUEUE={**settings.WORKQUEUE, "MAX_PAYLOAD_BYTES": 1000})
def test_payload_size_counts_utf8_bytes_of_args_and_kwargs_together(nothing_written):
    # 497 two-byte characters + 6 = 1000 bytes: accepted; more bytes in kwargs: refused.
    job = send_mail.enqueue("é" * 497)
    Job.objects.filter(pk=job.pk).delete()
    with pytest.raises(PayloadTooLarge, match="are 1,011 bytes"):
        send_mail.enqueue("é" * 497, subject=1)  # '{"subject":1}': 13 bytes, not 2


def test_the_default_limit_is_256_kib_inclusive(db):
    limit = 256 * 1024
    job = send_mail.enqueue("x" * (limit - OVERHEAD))
    assert Job.objects.filter(pk=job.pk).exists()
    with pytest.raises(PayloadTooLarge, match=r"are 256\.0 KiB \(262,145 bytes\)"):
        send_mail.enqueue("x" * (limit + 1 - OVERHEAD))
    assert Job.objects.count() == 1


def test_a_ten_megabyte_payload_is_refused_naming_both_sizes(nothing_written):
    size = 10 * 1024 * 1024
    with pytest.raises(PayloadTooLarge) as raised:
        send_mail.enqueue("x" * (size - OVERHEAD))
    message = str(raised.value)
    assert f"args of {SEND_MAIL} are 10,240.0 KiB (10,485,760 bytes)" in message
    assert "the limit is 256.0 KiB (262,144 bytes)" in message


def test_an_unknown_queue_is_refused_listing_the_queues(nothing_written):
    with pytest.raises(UnknownQueue) as raised:
        add.using(queue="emails").enqueue(1, 2)
    assert str(raised.value) == (
        f"{ADD}: queue 'emails' is not one of WORKQUEUE['QUEUES'] "
        f"['default', 'mail', 'reports', 'low']; add it there or enqueue to one of those"
    )


@pytest.mark.parametrize("priority", [101, -101, 1000, True, False, 1.5, "5"])
def test_a_bad_priority_is_refused(nothing_written, priority):
    with pytest.raises(InvalidPriority) as raised:
        add.using(priority=priority).enqueue(1, 2)
    assert str(raised.value) == (
        f"{ADD}: priority must be an integer from -100 to 100 (higher runs first), got {priority!r}"
    )


@pytest.mark.parametrize("option", ["run_at", "deadline"])
def test_a_naive_datetime_is_refused_when_use_tz_is_on(nothing_written, option):
    naive = dt.datetime(2030, 1, 1, 12, 0)
    with pytest.raises(NaiveDatetime) as raised:
        add.using(**{option: naive}).enqueue(1, 2)
    assert str(raised.value) == (
        f"{ADD}: {option}=2030-01-01T12:00:00 is a naive datetime while USE_TZ is on; "
        f"attach a timezone (django.utils.timezone.make_aware or datetime.UTC)"
    )


def test_run_at_must_be_a_datetime(nothing_written):
    with pytest.raises(InvalidOption, match="run_at must be a datetime, got str"):
        add.using(run_at="2030-01-01T00:00:00Z").enqueue(1, 2)


def test_delay_and_run_at_together_are_refused(nothing_written):
    with pytest.raises(InvalidOption, match=f"{ADD}: give delay or run_at, not both"):
        add.using(delay=5, run_at=timezone.now()).enqueue(1, 2)


@pytest.mark.parametrize(
    ("option", "value"),
    [("delay", -1), ("delay", dt.timedelta(seconds=-5)), ("deadline", -0.5)],
)
def test_a_negative_delay_or_deadline_is_refused(nothing_written, option, value):
    with pytest.raises(InvalidOption) as raised:
        add.using(**{option: value}).enqueue(1, 2)
    assert str(raised.value) == f"{ADD}: {option} must not be negative, got {value!r}"


@pytest.mark.parametrize("value", ["30", True, [30]])
def test_a_delay_that_is_not_a_number_is_refused(nothing_written, value):
    with pytest.raises(InvalidOption, match="delay must be seconds"):
        add.using(delay=value).enqueue(1, 2)


@pytest.mark.parametrize("key", ["", "k" * 256, 42, b"key"])
def test_a_bad_unique_key_is_refused(nothing_written, key):
    with pytest.raises(InvalidOption, match=f"{ADD}: unique_key must be a string of 1 to 255"):
        add.using(unique_key=key).enqueue(1, 2)


def test_a_unique_key_of_255_characters_is_accepted(db):
    job = add.using(unique_key="k" * 255).enqueue(1, 2)
    assert Job.objects.get(pk=job.pk).unique_key == "k" * 255


@pytest.mark.parametrize("option", ["max_attempts", "lease_seconds"])
@pytest.mark.parametrize("value", [0, -1, True, "3", 2.0])
def test_bad_max_attempts_or_lease_seconds_are_refused(nothing_written, option, value):
    with pytest.raises(InvalidOption) as raised:
        add.using(**{option: value}).enqueue(1, 2)
    assert str(raised.value) == f"{ADD}: {option} must be a positive integer, got {value!r}"


@pytest.mark.parametrize(("args", "kwargs"), [("12", {}), ((1,), [("b", 2)])])
def test_args_and_kwargs_must_be_a_sequence_and_a_mapping(nothing_written, args, kwargs):
    with pytest.raises(InvalidOption, match=r"must be a (list or tuple|mapping)"):
        add.enqueue_many([(args, kwargs)])


def test_enqueue_many_with_one_bad_item_writes_nothing(nothing_written):
    calls = [((1, 2), {}), ((3, 4), {}), ((5, object()), {}), ((7, 8), {})]
    with pytest.raises(PayloadNotJSON) as raised:
        add.enqueue_many(calls)
    assert str(raised.value).startswith(f"{ADD} item 2: args[1] is a builtins.object")


@override_settings(WORKQUEUE={**settings.WORKQUEUE, "MAX_PAYLOAD_BYTES": 100})
def test_enqueue_many_with_one_oversized_item_writes_nothing(nothing_written):
    with pytest.raises(PayloadTooLarge, match=f"args of {SEND_MAIL} item 1 are 206 bytes"):
        send_mail.enqueue_many([(("small",), {}), (("x" * 200,), {})])


def test_enqueue_many_with_an_item_that_is_not_a_pair_writes_nothing(nothing_written):
    with pytest.raises(InvalidOption, match=rf"{ADD}.enqueue_many\(\): item 1 is not an"):
        add.enqueue_many([((1, 2), {}), (1,)])


def test_enqueue_many_refuses_a_shared_unique_key(nothing_written):
    with pytest.raises(InvalidOption, match="cannot share one unique_key among many jobs"):
        add.using(unique_key="k").enqueue_many([((1, 2), {}), ((3, 4), {})])


def test_enqueue_many_refuses_a_bad_option_before_writing(nothing_written):
    with pytest.raises(UnknownQueue):
        add.using(queue="nope").enqueue_many([((1, 2), {})])


# --- unique keys --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_second_enqueue_with_an_active_unique_key_returns_the_existing_job():
    first = add.using(unique_key="nightly").enqueue(1, 2)
    second = add.using(unique_key="nightly").enqueue(3, 4)
    assert first.duplicate is False
    assert second.duplicate is True
    assert second.pk == first.pk
    assert second.args == [1, 2]  # the stored job, not the refused call
    assert Job.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("status", [Status.BLOCKED, Status.RUNNING])
def test_a_unique_key_is_held_by_blocked_and_running_jobs(status):
    first = add.using(unique_key="k").enqueue(1, 2)
    Job.objects.filter(pk=first.pk).update(status=status)
    second = add.using(unique_key="k").enqueue(1, 2)
    assert (second.pk, second.duplicate, second.status) == (first.pk, True, status)
    assert Job.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED, Status.CANCELLED])
def test_a_finished_job_frees_its_unique_key(status):
    first = add.using(unique_key="k").enqueue(1, 2)
    Job.objects.filter(pk=first.pk).update(status=status, finished_at=Now())
    second = add.using(unique_key="k").enqueue(3, 4)
    assert second.pk != first.pk
    assert second.duplicate is False
    assert Job.objects.filter(unique_key="k").count() == 2
    assert Job.objects.get(pk=second.pk).args == [3, 4]


@pytest.mark.django_db(transaction=True)
def test_a_unique_key_is_freed_when_the_holder_runs_to_completion(drain):
    first = add.using(unique_key="once").enqueue(1, 2)
    drain()
    first.refresh_from_db()
    assert (first.status, first.result) == (Status.SUCCEEDED, 3)
    second = add.using(unique_key="once").enqueue(5, 6)
    assert second.pk != first.pk
    assert second.duplicate is False


@pytest.mark.django_db
def test_different_unique_keys_do_not_collide():
    a = add.using(unique_key="a").enqueue(1, 2)
    b = add.using(unique_key="b").enqueue(1, 2)
    assert a.pk != b.pk
    assert (a.duplicate, b.duplicate) == (False, False)


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_inside_a_transaction_leaves_the_transaction_usable():
    # On PostgreSQL a failed INSERT aborts the whole transaction unless it ran in a savepoint.
    with transaction.atomic():
        first = add.using(unique_key="k").enqueue(1, 2)
        second = add.using(unique_key="k").enqueue(1, 2)
        other = add.enqueue(9, 9)
        assert Job.objects.count() == 2
    assert second.pk == first.pk
    assert set(Job.objects.values_list("pk", flat=True)) == {first.pk, other.pk}


@pytest.mark.django_db
def test_max_attempts_and_status_are_untouched_by_a_duplicate():
    first = add.using(unique_key="k", max_attempts=2).enqueue(1, 2)
    add.using(unique_key="k", max_attempts=8, priority=50).enqueue(1, 2)
    stored = Job.objects.get(pk=first.pk)
    assert (stored.max_attempts, stored.priority, stored.status) == (2, 0, Status.READY)


# --- wake-ups -----------------------------------------------------------------------------------


@pytest.fixture
def listen_connection():
    """A LISTEN on its own autocommit psycopg connection to the test database."""
    with listening() as listener:
        yield listener


def notifications_until(listener: Any, last: str) -> list[str]:
    """Payloads received, in order, up to and including ``last`` (or a 10 s timeout)."""
    received: list[str] = []
    for notice in listener.notifies(timeout=10):
        received.append(notice.payload)
        if notice.payload == last:
            break
    return received


@pytest.mark.postgres_only  # LISTEN/NOTIFY exists only on PostgreSQL; SQLite workers poll.
@pytest.mark.django_db(transaction=True)
def test_commit_sends_one_notify_per_queue_carrying_the_queue_name(listen_connection):
    with transaction.atomic():
        add.using(queue="mail").enqueue(1, 2)
        add.using(queue="mail").enqueue(3, 4)  # folded into the first by PostgreSQL
        add.using(queue="reports").enqueue(5, 6)
    add.using(queue="low").enqueue(0, 0)  # a marker: notifications arrive in commit order
    assert notifications_until(listen_connection, "low") == ["mail", "reports", "low"]


@pytest.mark.postgres_only  # LISTEN/NOTIFY exists only on PostgreSQL; SQLite workers poll.
@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_enqueue_sends_no_notify(listen_connection):
    with pytest.raises(Rollback), transaction.atomic():
        add.using(queue="mail").enqueue(1, 2)
        raise Rollback
    add.using(queue="low").enqueue(0, 0)  # the marker comes first: nothing was sent before it
    assert notifications_until(listen_connection, "low") == ["low"]


@pytest.mark.postgres_only  # LISTEN/NOTIFY exists only on PostgreSQL; SQLite workers poll.
@pytest.mark.django_db(transaction=True)
def test_enqueue_many_notifies_each_queue_it_used(listen_connection):
    send_mail.enqueue_many([(("a",), {}), (("b",), {})])
    add.using(queue="low").enqueue(0, 0)
    assert notifications_until(listen_connection, "low") == ["mail", "low"]


@pytest.fixture
def wake_events():
    """Register in-process wake-up events for queues; unregister them afterwards."""
    registered: list[threading.Event] = []

    def register(*queues: str) -> threading.Event:
        event = threading.Event()
        wakeup.register(event, queues)
        registered.append(event)
        return event

    yield register
    for event in registered:
        wakeup.unregister(event)


@pytest.mark.django_db(transaction=True)
def test_local_workers_are_woken_after_commit(wake_events):
    mail, reports = wake_events("mail", "default"), wake_events("reports")
    with transaction.atomic():
        send_mail.enqueue("a@example.com")
        assert not mail.is_set()  # not before the commit
    assert mail.is_set()
    assert not reports.is_set()  # a worker of another queue is not disturbed


@pytest.mark.django_db(transaction=True)
def test_local_workers_are_not_woken_by_a_rollback(wake_events):
    mail = wake_events("mail")
    with pytest.raises(Rollback), transaction.atomic():
        send_mail.enqueue("a@example.com")
        raise Rollback
    assert not mail.is_set()
    send_mail.enqueue("b@example.com")  # autocommit: woken at once
    assert mail.is_set()


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_wakes_local_workers_after_commit(wake_events):
    default = wake_events("default")
    with transaction.atomic():
        add.enqueue_many([((1, 2), {})])
        assert not default.is_set()
    assert default.is_set()


@pytest.mark.django_db(transaction=True)
def test_an_unregistered_event_is_not_woken(wake_events):
    event = wake_events("default")
    wakeup.unregister(event)
    add.enqueue(1, 2)
    assert not event.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_savepoint_does_not_wake_but_the_outer_commit_does(wake_events):
    mail, reports = wake_events("mail"), wake_events("reports")
    with transaction.atomic():
        with pytest.raises(Rollback), transaction.atomic():
            send_mail.enqueue("a@example.com")
            raise Rollback
        add.using(queue="reports").enqueue(1, 2)
    assert not mail.is_set()
    assert reports.is_set()


@pytest.mark.django_db
def test_unique_keys_of_different_tasks_do_not_collide():
    first = add.using(unique_key="shared").enqueue(1, 2)
    other = send_mail.using(unique_key="shared").enqueue("a@example.com")
    assert other.duplicate is False
    assert other.pk != first.pk
    assert Job.objects.filter(unique_key="shared").count() == 2

"""Enqueue binds each call to the task function's parameters: a call that could never run is
refused with ``InvalidArguments`` naming the task, the mismatch and the parameters, and nothing
is written (it used to be stored, then fail every attempt with a ``TypeError``)."""

from __future__ import annotations

import re

import pytest
from django.db import transaction

from django_workqueue import EnqueueError, InvalidArguments, task
from django_workqueue.models import Job
from testproject.testapp.tasks import add, record

ADD = "testproject.testapp.tasks.add"
RECORD = "testproject.testapp.tasks.record"


@task(name="tests.arguments.variadic")
def variadic(first, *rest, **options):
    return [first, rest, options]


@task(name="tests.arguments.keyword_only")
def keyword_only(a, *, flag, verbose=False):
    return [a, flag, verbose]


@task(name="tests.arguments.positional_only")
def positional_only(a, /, b=0):
    return [a, b]


@pytest.fixture
def nothing_written(db):
    """Assert that the test's refused enqueue wrote no row."""
    yield
    assert Job.objects.count() == 0


def refused(enqueue, *args, **kwargs) -> str:
    with pytest.raises(InvalidArguments) as raised:
        enqueue(*args, **kwargs)
    return str(raised.value)


@pytest.mark.parametrize(
    ("args", "kwargs", "problem"),
    [
        ((1, 2, 3), {}, "add.enqueue(1, 2, 3): too many positional arguments"),
        ((1,), {}, "add.enqueue(1): missing a required argument: 'b'"),
        ((1, 2), {"c": 3}, "add.enqueue(1, 2, c=3): got an unexpected keyword argument 'c'"),
        ((1,), {"a": 2}, "add.enqueue(1, a=2): multiple values for argument 'a'"),
    ],
)
def test_a_call_that_does_not_fit_the_parameters_is_refused(nothing_written, args, kwargs, problem):
    message = refused(add.enqueue, *args, **kwargs)
    assert message == f"testproject.testapp.tasks.{problem}; the task's parameters are add(a, b)"


def test_the_error_is_an_enqueue_error_and_a_type_error(nothing_written):
    with pytest.raises(EnqueueError):
        add.enqueue(1)
    with pytest.raises(TypeError):
        add.enqueue(1)


def test_calls_that_fit_are_stored_as_given(db):
    jobs = [add.enqueue(1, 2), add.enqueue(1, b=2), add.enqueue(a=1, b=2)]
    stored = [(job.args, job.kwargs) for job in Job.objects.order_by("pk")]
    assert stored == [([1, 2], {}), ([1], {"b": 2}), ([], {"a": 1, "b": 2})]
    assert all(job.pk for job in jobs)


def test_a_context_task_is_enqueued_without_its_context(db):
    record.enqueue()
    record.enqueue("a note")
    record.enqueue(note="a note")
    assert Job.objects.count() == 3


def test_a_context_task_names_its_parameters_after_the_context(nothing_written):
    assert refused(record.enqueue, "a", "b") == (
        f"{RECORD}.enqueue('a', 'b'): too many positional arguments; the task's parameters are "
        f"record(note='') after the context, which the worker passes"
    )
    # The context is the worker's to pass: it is not a parameter of the call.
    assert "unexpected keyword argument 'context'" in refused(record.enqueue, context=1)


def test_star_args_and_star_kwargs_take_any_extra_arguments(db):
    variadic.enqueue(1)
    variadic.enqueue(1, 2, 3, colour="red")
    assert Job.objects.count() == 2


def test_star_args_still_need_the_required_ones(nothing_written):
    assert refused(variadic.enqueue, colour="red") == (
        "tests.arguments.variadic.enqueue(colour='red'): missing a required argument: 'first'; "
        "the task's parameters are variadic(first, *rest, **options)"
    )


def test_a_required_keyword_only_parameter_must_be_given_by_name(db):
    message = refused(keyword_only.enqueue, 1)
    # Python 3.12 says "keyword-only argument", 3.11 "argument": the wording is inspect's.
    assert re.search(
        r"missing a required (keyword-only )?argument: 'flag'; the task's parameters are "
        r"keyword_only\(a, \*, flag, verbose=False\)$",
        message,
    ), message
    assert "too many positional arguments" in refused(keyword_only.enqueue, 1, True)
    keyword_only.enqueue(1, flag=True)
    assert Job.objects.count() == 1


def test_a_positional_only_parameter_cannot_be_given_by_name(db):
    message = refused(positional_only.enqueue, a=1)
    # Python's own words, which changed in 3.13.
    assert re.search(
        r"'a' parameter is positional only, but was passed as a keyword"
        r"|positional-only arguments passed as keyword arguments: 'a'",
        message,
    )
    positional_only.enqueue(1, b=2)
    assert Job.objects.count() == 1


def test_using_keeps_the_check(nothing_written):
    message = refused(add.using(priority=5, queue="mail").enqueue, 1)
    assert message.startswith(f"{ADD}.enqueue(1): missing a required argument: 'b'")


def test_long_arguments_are_shortened_in_the_message(nothing_written):
    message = refused(add.enqueue, "x" * 1000, list(range(1000)), 3)
    assert len(message) < 300
    assert "too many positional arguments" in message


def test_enqueue_many_names_the_item_and_writes_nothing(nothing_written):
    calls = [((1, 2), {}), ((3, 4), {}), ((5,), {}), ((7, 8), {})]
    assert refused(add.enqueue_many, calls) == (
        f"{ADD}.enqueue_many(): item 2, add(5): missing a required argument: 'b'; "
        f"the task's parameters are add(a, b)"
    )


def test_enqueue_many_checks_keyword_items_too(nothing_written):
    calls = [((), {"a": 1, "b": 2}), ((1,), {"b": 2, "c": 3})]
    message = refused(add.enqueue_many, calls)
    assert message.startswith(f"{ADD}.enqueue_many(): item 1, add(1, b=2, c=3): got an")


def test_enqueue_many_of_calls_that_fit_stores_them_all(db):
    record.enqueue_many([((), {}), (("a",), {}), ((), {"note": "b"})])
    assert Job.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_refused_call_leaves_the_callers_transaction_usable():
    """Nothing reaches the database, so the transaction (aborted on PostgreSQL by a failed
    statement) goes on and commits what else it did."""
    with transaction.atomic():
        with pytest.raises(InvalidArguments):
            add.enqueue(1)
        job = add.enqueue(1, 2)
    assert list(Job.objects.values_list("pk", flat=True)) == [job.pk]

"""enqueue_many's batch path: arguments of plain JSON scalars are validated and encoded for the
whole call at once, and the returned jobs are built without ``Model.__init__``. Whatever path a
call takes, the jobs and the errors are the same."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.conf import settings
from django.db.models.signals import post_init
from django.test import override_settings

from django_workqueue.exceptions import InvalidArguments, PayloadNotJSON
from django_workqueue.models import Job
from testproject.testapp.tasks import add, send_mail

ADD = "testproject.testapp.tasks.add"
SEND_MAIL = "testproject.testapp.tasks.send_mail"
FIELDS = [field.attname for field in Job._meta.concrete_fields]


def as_stored(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in FIELDS}


def assert_returned_as_stored(jobs: list[Job]) -> None:
    stored = {job.pk: job for job in Job.objects.filter(pk__in=[job.pk for job in jobs])}
    assert len(stored) == len(jobs)
    for job in jobs:
        assert not job.get_deferred_fields()  # every column set: reading one costs no query
        assert as_stored(job) == as_stored(stored[job.pk])
        assert (job._state.adding, job._state.db) == (False, "default")
        assert job.duplicate is False  # type: ignore[attr-defined]


CALLS = [
    ((1, 2), {}),
    ([1.5, -2], {}),
    (("a", None), {}),
    ((True,), {"b": "x"}),
    ((), {"a": 0, "b": 2**40}),
    ((3, 4), {}, None),
]


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_of_plain_arguments_returns_each_job_as_the_database_holds_it():
    jobs = add.enqueue_many(CALLS)
    assert [(job.args, job.kwargs) for job in jobs] == [
        ([1, 2], {}), ([1.5, -2], {}), (["a", None], {}), ([True], {"b": "x"}),
        ([], {"a": 0, "b": 2**40}), ([3, 4], {}),
    ]  # fmt: skip
    assert_returned_as_stored(jobs)


@pytest.mark.django_db(transaction=True)
def test_the_returned_jobs_are_independent_model_instances():
    first, second = add.enqueue_many([((1, 2), {}), ((3, 4), {})])
    first.errors.append("x")
    first.args.append(9)
    assert (second.errors, second.args) == ([], [3, 4])
    first.priority = 7
    first.save(update_fields=["priority"])
    assert Job.objects.get(pk=first.pk).priority == 7


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_builds_jobs_through_post_init_when_a_receiver_listens():
    seen: list[Job] = []

    def receiver(sender: type[Job], instance: Job, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Job)
    try:
        jobs = add.enqueue_many([((1, 2), {}), ((3, 4), {})])
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert all(any(job is instance for instance in seen) for job in jobs)
    assert_returned_as_stored(jobs)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "calls",
    [
        [((["nested", [1]], {"k": {"deep": True}}), {})],
        [(("é",), {}), (("ok",), {})],
        [((1, 2), {}), ((3, 4), {}, "own-key")],
    ],
    ids=["nested", "non-ascii", "a key of its own"],
)
def test_enqueue_many_of_other_arguments_inserts_them_as_given(calls):
    jobs = send_mail.enqueue_many(calls)
    assert [(job.args, job.kwargs) for job in jobs] == [
        (list(call[0]), dict(call[1])) for call in calls
    ]
    assert_returned_as_stored(jobs)


@pytest.mark.django_db(transaction=True)
@override_settings(WORKQUEUE={**settings.WORKQUEUE, "MAX_PAYLOAD_BYTES": 100})
def test_enqueue_many_whose_jobs_together_pass_the_payload_limit_inserts_each_job():
    jobs = send_mail.enqueue_many([((f"to-{n}", "s" * 20), {}) for n in range(10)])
    assert len(jobs) == Job.objects.count() == 10
    assert_returned_as_stored(jobs)


@pytest.fixture
def nothing_written(db):
    yield
    assert Job.objects.count() == 0


def test_a_nan_argument_is_refused_naming_its_item(nothing_written):
    with pytest.raises(PayloadNotJSON) as raised:
        add.enqueue_many([((1, 2), {}), ((math.nan, 2), {})])
    assert str(raised.value).startswith(f"{ADD} item 1: args[0] is nan, which JSON cannot")


def test_a_nul_character_is_refused_naming_its_item(nothing_written):
    with pytest.raises(PayloadNotJSON) as raised:
        send_mail.enqueue_many([(("a",), {}), (("b\x00",), {})])
    assert str(raised.value).startswith(f"{SEND_MAIL} item 1: a string in args contains a NUL")


def test_a_call_that_does_not_fit_the_task_is_refused_naming_its_item(nothing_written):
    with pytest.raises(InvalidArguments) as raised:
        add.enqueue_many([((1, 2), {}), ((1, 2, 3), {})])
    assert str(raised.value).startswith(f"{ADD}.enqueue_many(): item 1, add(1, 2, 3): ")


def test_the_first_bad_item_is_the_one_named(nothing_written):
    with pytest.raises(InvalidArguments) as raised:
        add.enqueue_many([((1, 2), {}), ((1,), {"c": 3}), ((math.inf, 2), {})])
    assert "item 1, add(1, c=3)" in str(raised.value)

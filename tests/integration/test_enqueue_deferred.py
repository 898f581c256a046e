"""Enqueue into a jobs database that is not ``default`` while ``default`` is inside a
transaction: the insert cannot join that transaction, so it is deferred to its commit
(``on_commit``). These tests point ``WORKQUEUE["DATABASE"]`` at a second alias, ``jobs``, that
reaches the same test database through its own connection."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import add


class Rollback(Exception):
    pass


def test_the_insert_waits_for_the_callers_commit(jobs_alias: str) -> None:
    with transaction.atomic():
        job = add.enqueue(1, 2)
        assert job.pk is None  # not inserted yet: the transaction may still roll back
        assert not Job.objects.using(jobs_alias).exists()
    assert job.pk is not None
    stored = Job.objects.using(jobs_alias).get(pk=job.pk)
    assert (stored.args, stored.status, job.duplicate) == ([1, 2], Status.READY, False)
    assert job.run_after == stored.run_after


def test_a_rolled_back_transaction_inserts_nothing(jobs_alias: str) -> None:
    with pytest.raises(Rollback), transaction.atomic():
        job = add.enqueue(1, 2)
        raise Rollback
    assert job.pk is None
    assert not Job.objects.using(jobs_alias).exists()


def test_outside_a_transaction_the_insert_is_immediate(jobs_alias: str) -> None:
    job = add.enqueue(1, 2)
    assert Job.objects.using(jobs_alias).filter(pk=job.pk).exists()


def test_a_held_unique_key_leaves_the_returned_job_unsaved(jobs_alias: str) -> None:
    """The caller gets its job back before the key can be checked. At commit the insert finds
    the key held, inserts nothing and raises nothing; the job the caller holds never gets an
    id and says ``duplicate == False`` (docs/reference/api.md, "What enqueue does")."""
    held = add.using(unique_key="nightly").enqueue(1, 2)
    with transaction.atomic():
        job = add.using(unique_key="nightly").enqueue(3, 4)
    assert (job.pk, job.duplicate) == (None, False)
    [stored] = Job.objects.using(jobs_alias).filter(unique_key="nightly")
    assert (stored.pk, stored.args) == (held.pk, [1, 2])


def test_a_free_unique_key_is_taken_at_commit(jobs_alias: str) -> None:
    with transaction.atomic():
        job = add.using(unique_key="nightly").enqueue(3, 4)
    stored = Job.objects.using(jobs_alias).get(unique_key="nightly")
    assert (job.pk, job.duplicate) == (stored.pk, False)


def test_a_workflow_is_written_at_the_callers_commit_or_not_at_all(jobs_alias: str) -> None:
    from django_workqueue import chain
    from django_workqueue.models import Workflow
    from testproject.testapp.tasks import double

    with pytest.raises(Rollback), transaction.atomic():
        chain(add.s(1, 2), double.s()).enqueue()
        raise Rollback
    assert not Workflow.objects.using(jobs_alias).exists()
    with transaction.atomic():
        workflow = chain(add.s(1, 2), double.s()).enqueue()
        assert workflow.pk is None
        assert not Job.objects.using(jobs_alias).exists()
    assert workflow.pk is not None
    statuses = Job.objects.using(jobs_alias).filter(workflow_id=workflow.pk).order_by("id")
    assert list(statuses.values_list("task_name", "status")) == [
        (add.name, Status.READY), (double.name, Status.BLOCKED),
    ]  # fmt: skip


def test_a_job_with_dependencies_is_written_at_the_callers_commit(jobs_alias: str) -> None:
    first = add.enqueue(1, 2)
    with transaction.atomic():
        job = add.using(depends_on=[first]).enqueue(3, 4)
        assert job.pk is None
    assert job.pk is not None and job.status == Status.BLOCKED
    stored = Job.objects.using(jobs_alias).get(pk=job.pk)
    assert (stored.waiting_on, stored.workflow_id) == (1, job.workflow_id)

"""A user's test suite for the shop in ``tasks.py``: django_workqueue.testing in plain
``TestCase`` classes (each test inside a transaction, on SQLite and PostgreSQL) and as
pytest fixtures (the plugin)."""

from __future__ import annotations

from typing import Any

import django
import pytest
from django.contrib.auth.models import Group
from django.test import TestCase, TransactionTestCase, override_settings

from django_workqueue import chain
from django_workqueue.exceptions import WorkqueueError
from django_workqueue.states import Status
from django_workqueue.testing import assert_enqueued, assert_not_enqueued, drain, run_job
from tests.sample_project.tasks import (
    confirm_order,
    flaky_charge,
    print_label,
    reserve_stock,
    send_receipt,
    ship,
)

EAGER = override_settings(WORKQUEUE={"QUEUES": ["default", "mail"], "EAGER": True})


class OrderTests(TestCase):
    def test_confirming_an_order_enqueues_its_receipt(self) -> None:
        confirm_order(7)
        jobs = assert_enqueued(send_receipt, args=[7], count=1)
        assert jobs[0].queue == "mail"
        assert_not_enqueued(send_receipt, args=[8])
        assert_not_enqueued(ship)

    def test_drain_runs_the_job_inside_the_tests_transaction(self) -> None:
        confirm_order(7)
        assert drain() == 1
        assert Group.objects.filter(name="receipt-7").exists()
        (job,) = assert_enqueued(send_receipt, args=[7], status=Status.SUCCEEDED)
        assert job.result == "receipt 7 sent"

    def test_drain_runs_a_workflow_to_its_end(self) -> None:
        workflow = chain(reserve_stock.s(3), ship.s()).enqueue()
        assert drain() == 2
        assert set(Group.objects.values_list("name", flat=True)) == {"reserved-3", "shipped-3"}
        workflow.refresh_from_db()
        assert workflow.status == "succeeded"

    def test_drain_runs_retries_that_are_due(self) -> None:
        flaky_charge.enqueue(5)
        assert drain() == 3
        (job,) = assert_enqueued(flaky_charge, args=[5])
        assert (job.status, job.attempt) == (Status.SUCCEEDED, 3)

    def test_run_job_runs_one_attempt(self) -> None:
        job = run_job(flaky_charge.enqueue(9))
        assert (job.status, job.attempt) == (Status.READY, 1)
        with self.assertRaisesMessage(WorkqueueError, "is succeeded, not ready"):
            run_job(run_job(send_receipt.enqueue(1)))

    def test_flow_controlled_jobs_run_with_drain(self) -> None:
        job = print_label.enqueue(4)
        with self.assertRaisesMessage(WorkqueueError, "is ready but cannot be claimed by itself"):
            run_job(job)
        assert drain() == 1
        job.refresh_from_db()
        assert (job.status, job.result) == (Status.SUCCEEDED, "label 4")

    def test_assert_enqueued_says_what_was_enqueued_instead(self) -> None:
        send_receipt.enqueue(1)
        with self.assertRaisesMessage(AssertionError, "found 0. Jobs of"):
            assert_enqueued(send_receipt, args=[2])
        with self.assertRaisesMessage(AssertionError, "found 1"):
            assert_enqueued(send_receipt, count=2)
        with self.assertRaisesMessage(AssertionError, "expected no job"):
            assert_not_enqueued(send_receipt)

    @EAGER
    def test_eager_mode_runs_jobs_when_the_enqueue_commits(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            confirm_order(4)
            assert not Group.objects.filter(name="receipt-4").exists()  # not before the commit
        assert Group.objects.filter(name="receipt-4").exists()

    @EAGER
    def test_eager_mode_runs_the_steps_a_job_releases(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            chain(reserve_stock.s(2), ship.s()).enqueue()
        assert Group.objects.filter(name="shipped-2").exists()


@EAGER
class EagerCommitTests(TransactionTestCase):
    def test_an_enqueue_outside_a_transaction_runs_at_once(self) -> None:
        confirm_order(11)
        assert Group.objects.filter(name="receipt-11").exists()


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0+")
class DjangoTaskTests(TestCase):
    def test_drain_runs_django_tasks_too(self) -> None:
        from tests.support.django_tasks import add

        result = add.enqueue(20, 22)
        assert_enqueued(add, args=[20, 22], count=1)
        drain()
        result.refresh()
        assert result.return_value == 42


# The pytest plugin's fixtures, as a pytest user writes the same tests.


def test_fixtures_drain_and_assert(
    db: None, workqueue_drain: Any, workqueue_assert_enqueued: Any
) -> None:
    confirm_order(12)
    workqueue_assert_enqueued(send_receipt, args=[12])
    assert workqueue_drain() == 1
    assert Group.objects.filter(name="receipt-12").exists()


def test_fixture_eager(
    db: None, workqueue_eager: None, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        confirm_order(13)
    assert Group.objects.filter(name="receipt-13").exists()


def test_fixture_run_job_and_not_enqueued(
    db: None, workqueue_run_job: Any, workqueue_assert_not_enqueued: Any
) -> None:
    workqueue_assert_not_enqueued(ship)
    assert workqueue_run_job(ship.enqueue(1)).status == Status.SUCCEEDED


@pytest.mark.django_db
def test_aenqueue_from_async_code() -> None:
    from asgiref.sync import async_to_sync

    job = async_to_sync(send_receipt.aenqueue)(21)
    assert_enqueued(send_receipt, args=[21], count=1)
    assert job.pk == assert_enqueued(send_receipt)[0].pk

"""The WorkqueueBackend against the contract of Django's ``django.tasks`` documentation:
enqueue, results and their statuses, async calls, signals, validation, transactions."""

from __future__ import annotations

import datetime
from typing import Any

import django
import pytest
from asgiref.sync import async_to_sync
from django.core.checks import run_checks
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_workqueue import operations
from django_workqueue.checks import check_settings
from django_workqueue.conf import workqueue_settings as conf
from django_workqueue.maintenance import reaper
from django_workqueue.models import Job
from django_workqueue.states import Status
from django_workqueue.testing import drain

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0+"),
]

ALL_STATUSES = [
    (Status.BLOCKED, "READY"),
    (Status.SCHEDULED, "READY"),
    (Status.READY, "READY"),
    (Status.HELD, "READY"),
    (Status.WAITING, "RUNNING"),
    (Status.RUNNING, "RUNNING"),
    (Status.SUCCEEDED, "SUCCESSFUL"),
    (Status.FAILED, "FAILED"),
    (Status.CANCELLED, "FAILED"),
]


@pytest.fixture
def tasks() -> Any:
    from tests.support import django_tasks

    return django_tasks


def _tasks_setting(**options: Any) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "django_workqueue.backend.WorkqueueBackend",
            "QUEUES": ["default", "mail"],
            "OPTIONS": options,
        }
    }


def test_backend_supports_everything_django_asks_about(tasks: Any) -> None:
    backend = tasks.add.get_backend()
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
    assert backend.check() == []


def test_enqueue_returns_a_ready_result_with_a_string_id(tasks: Any) -> None:
    from django.tasks import TaskResultStatus

    result = tasks.send.enqueue("a@example.com", subject="hi")
    assert isinstance(result.id, str)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs) == (["a@example.com"], {"subject": "hi"})
    assert result.backend == "default" and result.enqueued_at is not None
    assert (result.started_at, result.finished_at, result.errors, result.attempts) == (
        None, None, [], 0,
    )  # fmt: skip
    job = Job.objects.get(pk=int(result.id))
    assert (job.task_name, job.queue, job.priority) == (
        "tests.support.django_tasks.send", "mail", 7,
    )  # fmt: skip
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


def test_using_sets_queue_priority_and_run_after(tasks: Any) -> None:
    later = timezone.now() + datetime.timedelta(hours=1)
    result = tasks.add.using(queue_name="mail", priority=-5, run_after=later).enqueue(1, 2)
    job = Job.objects.get(pk=int(result.id))
    assert (job.queue, job.priority, job.status) == ("mail", -5, Status.SCHEDULED)
    assert abs((job.run_after - later).total_seconds()) < 1
    fetched = tasks.add.get_result(result.id)
    assert (fetched.status, fetched.task.queue_name, fetched.task.priority) == ("READY", "mail", -5)


@pytest.mark.parametrize(("ours", "django_status"), ALL_STATUSES)
def test_every_status_maps_to_djangos(tasks: Any, ours: Status, django_status: str) -> None:
    result = tasks.add.enqueue(1, 2)
    Job.objects.filter(pk=int(result.id)).update(status=ours)
    assert tasks.add.get_result(result.id).status == django_status


def test_a_success_carries_its_return_value_and_times(tasks: Any) -> None:
    result = tasks.add.enqueue(2, 3)
    assert drain() == 1
    result.refresh()
    assert result.status == "SUCCESSFUL" and result.is_finished
    assert result.return_value == 5
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at


def test_a_failure_after_retries_lists_every_error(tasks: Any) -> None:
    result = tasks.boom.enqueue("no luck")  # max_attempts=2, backoff=0 (TASK_OPTIONS)
    assert drain() == 2
    result.refresh()
    assert result.status == "FAILED" and result.attempts == 2
    assert all(worker.startswith("drain:") for worker in result.worker_ids)
    assert [error.exception_class for error in result.errors] == [ValueError, ValueError]
    assert "no luck" in result.errors[-1].traceback
    assert "Traceback" in result.errors[-1].traceback
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_a_failing_task_runs_once_by_default_as_django_tasks_promises(tasks: Any) -> None:
    """No retries unless asked for (TASK_DEFAULTS, TASK_OPTIONS or the task): after one run
    the result is FAILED, with its finish time and its error."""
    from tests.support.django_tasks import fails_once_by_default

    result = fails_once_by_default.enqueue("once")
    assert drain() == 1
    result.refresh()
    assert (result.status, result.attempts) == ("FAILED", 1)
    assert result.finished_at is not None
    assert [error.exception_class for error in result.errors] == [ValueError]
    job = Job.objects.get(pk=int(result.id))
    assert (job.max_attempts, job.attempts_charged) == (1, 1)


def test_a_crash_does_not_fail_a_task_of_one_body_attempt(tasks: Any) -> None:
    """A worker's crash spends the crash budget, not the body's single attempt."""
    from tests.support.django_tasks import fails_once_by_default

    result = fails_once_by_default.enqueue("crash")
    job = Job.objects.get(pk=int(result.id))
    Job.objects.filter(pk=job.pk).update(
        status=Status.RUNNING, attempt=1, lease_owner="gone", started_at=timezone.now(),
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1),
    )  # fmt: skip
    assert reaper.run_once() == 1
    job.refresh_from_db()
    assert (job.status, job.max_attempts, job.attempts_charged, job.crashes_charged) == (
        Status.READY, 1, 0, 1,
    )  # fmt: skip
    result.refresh()
    assert result.status == "READY"


def test_a_discarded_task_fails_at_once(tasks: Any) -> None:
    result = tasks.give_up.enqueue("bad input")
    drain()
    result.refresh()
    assert (result.status, result.attempts) == ("FAILED", 1)
    assert result.errors[0].exception_class_path == "django_workqueue.exceptions.Discard"


def test_a_cancelled_job_is_a_failed_result(tasks: Any) -> None:
    result = tasks.add.enqueue(1, 1)
    operations.cancel_job(Job.objects.get(pk=int(result.id)))
    result.refresh()
    assert result.status == "FAILED"
    assert result.errors[-1].exception_class_path == "django_workqueue.exceptions.JobCancelled"


def test_a_task_taking_context_gets_djangos_task_context(tasks: Any) -> None:
    result = tasks.attempt_of.enqueue("x")
    drain()
    result.refresh()
    assert result.return_value == {"attempt": 1, "id": result.id, "value": "x"}


def test_async_tasks_run_and_async_calls_work(tasks: Any) -> None:
    async def enqueue_and_read() -> Any:
        result = await tasks.async_double.aenqueue(21)
        fetched = await tasks.async_double.aget_result(result.id)
        return result, fetched

    result, fetched = async_to_sync(enqueue_and_read)()
    assert fetched.id == result.id and fetched.status == "READY"
    drain()

    async def refresh() -> None:
        await result.arefresh()

    async_to_sync(refresh)()
    assert result.return_value == 42


def test_unknown_or_foreign_results_do_not_exist(tasks: Any) -> None:
    from django.tasks.exceptions import TaskResultDoesNotExist

    from tests.support.tasks import connection_state as native

    backend = tasks.add.get_backend()
    native = native.enqueue()
    for result_id in ["999999", "not-a-number", str(native.pk)]:
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(backend.aget_result)("999999")


def test_signals_fire_for_enqueue_start_and_finish(
    tasks: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from django.tasks.signals import task_enqueued, task_finished, task_started

    seen: list[tuple[str, str, str]] = []

    def receiver(name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((name, task_result.id, str(task_result.status)))

        return receive

    receivers = {s: receiver(n) for s, n in [(task_enqueued, "enqueued"),
                                            (task_started, "started"),
                                            (task_finished, "finished")]}  # fmt: skip
    for signal, receive in receivers.items():
        signal.connect(receive)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            ok = tasks.add.enqueue(1, 2)
            bad = tasks.give_up.enqueue("x")
        with django_capture_on_commit_callbacks(execute=True):
            drain()
    finally:
        for signal, receive in receivers.items():
            signal.disconnect(receive)
    assert seen == [
        ("enqueued", ok.id, "READY"),
        ("enqueued", bad.id, "READY"),
        ("started", ok.id, "RUNNING"),  # as each attempt begins
        ("started", bad.id, "RUNNING"),
        ("finished", ok.id, "SUCCESSFUL"),  # once each outcome has committed
        ("finished", bad.id, "FAILED"),
    ]


def test_enqueue_joins_the_callers_transaction(tasks: Any) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        assert Job.objects.filter(pk=int(result.id)).exists()
        raise RuntimeError("roll back")
    assert not Job.objects.filter(task_name="tests.support.django_tasks.add").exists()


def test_on_commit_option_inserts_after_the_commit(
    tasks: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from django.tasks.signals import task_enqueued

    announced: list[str] = []

    def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
        announced.append(task_result.id)

    task_enqueued.connect(receive)
    with override_settings(TASKS=_tasks_setting(ON_COMMIT=True)):
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            result = tasks.add.enqueue(1, 2)
            assert result.id == ""
            assert not Job.objects.filter(task_name="tests.support.django_tasks.add").exists()
        task_enqueued.disconnect(receive)
        assert Job.objects.get(pk=int(result.id)).task_name == "tests.support.django_tasks.add"
        assert announced == [result.id]  # once, with the id the commit gave it
        with pytest.raises(RuntimeError), transaction.atomic():
            tasks.add.enqueue(3, 4)
            raise RuntimeError("roll back")
        assert Job.objects.filter(task_name="tests.support.django_tasks.add").count() == 1


def test_validate_task_refuses_what_the_engine_cannot_run(tasks: Any) -> None:
    from django.tasks import task
    from django.tasks.exceptions import InvalidTask

    def local(): ...

    with pytest.raises(InvalidTask, match="module level"):
        task(local)
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="not valid for backend"):
        tasks.add.using(queue_name="reports")  # in WORKQUEUE["QUEUES"], not in the backend's


def test_the_queues_of_tasks_exist_without_repeating_them_in_workqueue(tasks: Any) -> None:
    from django.tasks.exceptions import InvalidTask

    setting = {"default": {**_tasks_setting()["default"], "QUEUES": ["default", "emails"]}}
    with override_settings(TASKS=setting, WORKQUEUE={}):
        assert conf.QUEUES == ["default", "emails"]  # "default": WORKQUEUE's own default
        assert tasks.add.get_backend().check() == []
        assert check_settings() == []
        assert "django_workqueue.E102" not in {m.id for m in run_checks()}
        result = tasks.add.using(queue_name="emails").enqueue(1, 2)
        assert Job.objects.get(pk=int(result.id)).queue == "emails"
        with pytest.raises(InvalidTask, match=r"^Queue 'nowhere' is not valid for backend\.$"):
            tasks.add.using(queue_name="nowhere")
    with override_settings(TASKS=setting):  # merged after WORKQUEUE["QUEUES"]
        assert conf.QUEUES == ["default", "mail", "reports", "low", "emails"]


def test_task_options_reach_the_engine(tasks: Any) -> None:
    from django_workqueue.registry import find_task

    options = {"TASK_DEFAULTS": {"max_attempts": 7},
               "TASK_OPTIONS": {"tests.support.django_tasks.send": {"unique_on": ["address"],
                                                                   "timeout": 30}}}  # fmt: skip
    with override_settings(TASKS=_tasks_setting(**options)):
        first = tasks.send.enqueue("a@example.com")
        again = tasks.send.enqueue("a@example.com", subject="other")
        assert first.id == again.id  # unique_on: the holder comes back
        spec = find_task("tests.support.django_tasks.send").spec
        assert (spec.max_attempts, spec.timeout) == (7, 30)
        assert Job.objects.get(pk=int(first.id)).max_attempts == 7


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"TASK_OPTIONS": {"tests.support.django_tasks.add": {"retries": 3}}}, "unknown task"),
        ({"TASK_DEFAULTS": {"max_attempts": 0}}, "max_attempts"),
        ({"EAGERLY": True}, "unknown key"),
    ],
)
def test_bad_task_options_are_refused_clearly(tasks: Any, options: Any, problem: str) -> None:
    from django.tasks.exceptions import InvalidTask

    with (
        override_settings(TASKS=_tasks_setting(**options)),
        pytest.raises(InvalidTask, match=problem),
    ):
        tasks.add.enqueue(1, 2)


@pytest.mark.skipif(django.VERSION < (6, 1), reason="@task passes extra arguments from 6.1")
def test_task_decorator_takes_our_options_on_django_61() -> None:
    from django.tasks import task

    from django_workqueue.registry import find_task

    def retried_often(): ...

    retried_often.__qualname__ = "retried_often"  # as if at module level
    decorated = task(max_attempts=9, backoff=0)(retried_often)
    assert decorated.max_attempts == 9
    assert find_task(decorated.module_path).spec.max_attempts == 9


def test_django_tasks_are_workflow_steps(tasks: Any) -> None:
    from django_workqueue import chain

    workflow = chain(tasks.add.s(1, 2), tasks.add.s(10), tasks.send.s()).enqueue()
    assert drain() == 3
    workflow.refresh_from_db()
    assert workflow.status == "succeeded"
    last = Job.objects.filter(workflow=workflow).order_by("pk").last()
    assert last.result == "hello -> 13"
    assert tasks.send.get_result(str(last.pk)).return_value == "hello -> 13"


def test_check_reports_unknown_options(tasks: Any) -> None:
    options = {"EAGERLY": True, "TASK_OPTIONS": {"tests.support.django_tasks.add": {"tries": 1}}}
    with override_settings(TASKS=_tasks_setting(**options)):
        messages = tasks.add.get_backend().check()
    assert [m.id for m in messages] == ["django_workqueue.E101", "django_workqueue.E101"]
    assert "'EAGERLY'" in messages[0].msg and "'tries'" in messages[1].msg

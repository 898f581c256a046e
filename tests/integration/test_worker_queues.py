"""runworker's queue selection: ``--queues '*'``, ``--exclude-queues``, ``--backend``."""

from __future__ import annotations

import io

import django
import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

WORKQUEUE_BACKEND = "django_workqueue.backend.WorkqueueBackend"
TWO_ALIASES = {
    "default": {"BACKEND": WORKQUEUE_BACKEND, "QUEUES": ["default", "emails"]},
    "reporting": {"BACKEND": WORKQUEUE_BACKEND, "QUEUES": ["reports"]},
    "elsewhere": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"},
}


def one_job_per_queue(*queues: str) -> dict[str, Job]:
    return {queue: add.using(queue=queue).enqueue(1, 2) for queue in queues}


def statuses(jobs: dict[str, Job]) -> dict[str, str]:
    return {queue: Job.objects.get(pk=job.pk).status for queue, job in jobs.items()}


def burst(*args: str) -> None:
    call_command("runworker", "--burst", *args, stdout=io.StringIO())


def test_every_queue_but_the_excluded_ones_is_served() -> None:
    jobs = one_job_per_queue("default", "mail", "reports", "low")

    burst("--queues", "*", "--exclude-queues", "reports,low")

    assert statuses(jobs) == {
        "default": Status.SUCCEEDED, "mail": Status.SUCCEEDED,
        "reports": Status.READY, "low": Status.READY,
    }  # fmt: skip


@pytest.mark.skipif(django.VERSION < (6, 0), reason="TASKS is Django 6's")
@override_settings(TASKS=TWO_ALIASES)
def test_a_backend_alias_serves_its_queues_the_other_aliases_queues_wait() -> None:
    jobs = one_job_per_queue("default", "emails", "reports")

    burst("--backend", "default")

    assert statuses(jobs) == {
        "default": Status.SUCCEEDED, "emails": Status.SUCCEEDED, "reports": Status.READY,
    }  # fmt: skip
    burst("--backend", "reporting", "--queues", "*")
    assert statuses(jobs)["reports"] == Status.SUCCEEDED


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"exclude_queues": "nosuch"}, "--exclude-queues names unknown queue(s) nosuch; "),
        ({"exclude_queues": "default,mail,reports,low"}, "--exclude-queues leaves no queue"),
        ({"queues": "default", "exclude_queues": "mail"}, "--exclude-queues goes with --queues"),
        ({"queues": "*,mail"}, "--queues '*' stands for every queue"),
        ({"queues": "*:4"}, "--queues '*' stands for every queue"),
    ],
)
def test_selections_that_make_no_sense_are_refused(options: dict[str, str], message: str) -> None:
    job = add.enqueue(1, 2)

    with pytest.raises(CommandError) as raised:
        call_command("runworker", "--burst", stdout=io.StringIO(), **options)

    assert message in str(raised.value)
    assert Job.objects.get(pk=job.pk).status == Status.READY


@pytest.mark.skipif(django.VERSION < (6, 0), reason="TASKS is Django 6's")
@override_settings(TASKS=TWO_ALIASES)
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backend": "nosuch"}, "--backend nosuch: TASKS has no alias 'nosuch'; its aliases are "
                                "'default', 'reporting', 'elsewhere'"),
        ({"backend": "elsewhere"}, "--backend elsewhere: TASKS['elsewhere'] runs on "
                                   "django.tasks.backends.dummy.DummyBackend, not "),
        ({"backend": "reporting", "queues": "emails"},
         "unknown queue(s) emails; TASKS['reporting']['QUEUES'] has reports"),
        ({"backend": "reporting", "exclude_queues": "reports"}, "leaves no queue to serve"),
    ],
)  # fmt: skip
def test_backend_selections_that_make_no_sense_are_refused(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("runworker", "--burst", stdout=io.StringIO(), **options)

    assert message in str(raised.value)

"""Build job rows in any state directly, instead of driving the whole system to get there."""

from __future__ import annotations

import datetime as dt

import factory
from django.utils import timezone

from django_workqueue.models import Job
from django_workqueue.states import Status


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    task_name = "testproject.testapp.tasks.add"
    queue = "default"
    priority = 0
    args = factory.LazyFunction(lambda: [1, 2])
    kwargs = factory.LazyFunction(dict)
    status = Status.READY
    attempt = 0
    max_attempts = 3
    lease_seconds = 60
    run_after = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(seconds=1))

    class Params:
        running = factory.Trait(
            status=Status.RUNNING,
            attempt=1,
            lease_owner="worker-a",
            started_at=factory.LazyFunction(timezone.now),
            lease_expires_at=factory.LazyFunction(
                lambda: timezone.now() + dt.timedelta(seconds=60)
            ),
        )
        expired = factory.Trait(
            status=Status.RUNNING,
            attempt=1,
            lease_owner="worker-a",
            started_at=factory.LazyFunction(lambda: timezone.now() - dt.timedelta(minutes=5)),
            lease_expires_at=factory.LazyFunction(
                lambda: timezone.now() - dt.timedelta(seconds=10)
            ),
        )
        failed = factory.Trait(
            status=Status.FAILED,
            attempt=3,
            attempts_charged=3,  # three failures of its body: its budget spent
            finished_at=factory.LazyFunction(timezone.now),
            errors=factory.LazyFunction(
                lambda: [
                    {
                        "attempt": n,
                        "at": "",
                        "type": "builtins.ValueError",
                        "message": "boom",
                        "traceback": "",
                    }
                    for n in (1, 2, 3)
                ]
            ),
        )

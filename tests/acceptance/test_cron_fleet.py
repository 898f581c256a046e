"""Four worker processes run an every-second schedule while one is SIGKILLed and restarted:
every tick fires exactly once, with one job each."""

from __future__ import annotations

import datetime as dt
import signal

import pytest

from django_workqueue.db import driver_for
from django_workqueue.models import Job, Schedule, ScheduleRun
from django_workqueue.schedules import next_tick
from tests.support.processes import StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

TASK = "testproject.testapp.tasks.scheduled_tick"
WORKERS = 4
ENV = {"WORKQUEUE_SCHEDULER_INTERVAL": "0.2"}


def fired() -> int:
    return ScheduleRun.objects.count()


# PostgreSQL only: concurrent processes racing for the same tick, each in its own transaction
# on its own connection, is the case the guarded next_run_at and the unique (schedule,
# fire_at) exist for. SQLite serialises every write transaction behind one lock.
@pytest.mark.postgres_only
def test_every_tick_fires_exactly_once_across_four_workers_and_a_sigkill(
    start_worker: StartWorker,
) -> None:
    workers = [start_worker("--concurrency", "2", name=f"w{n}", env=ENV) for n in range(WORKERS)]
    for worker in workers:
        worker.wait_started()
    # catch_up="all": a tick the fleet was late for (a pass delayed past the next second) still
    # fires, so "every tick" does not depend on timing; exactly-once is what is under test.
    first = next_tick("* * * * * *", "UTC", driver_for("default").now())
    schedule = Schedule.objects.create(
        name="every-second", task_name=TASK, cron="* * * * * *", catch_up="all",
        source="runtime", next_run_at=first,
    )  # fmt: skip

    wait_for(lambda: fired() >= 10, alive=workers, timeout=60, message="10 ticks")
    workers[0].kill()  # SIGKILL, perhaps in the middle of firing a tick
    alive = workers[1:]
    wait_for(lambda: fired() >= 20, alive=alive, timeout=60, message="20 ticks")
    restarted = start_worker("--concurrency", "2", name="w0-again", env=ENV)
    restarted.wait_started()
    alive.append(restarted)
    wait_for(lambda: fired() >= 32, alive=alive, timeout=60, message="32 ticks")

    Schedule.objects.filter(pk=schedule.pk).update(enabled=False)
    for worker in alive:
        worker.send(signal.SIGTERM)
    assert [worker.wait() for worker in alive] == [0] * len(alive)

    runs = list(ScheduleRun.objects.filter(schedule=schedule).order_by("fire_at"))
    ticks = [run.fire_at for run in runs]
    # Every second from the first tick to the last, each once: no gap, no duplicate.
    assert ticks == [first + dt.timedelta(seconds=n) for n in range(len(ticks))]
    assert len(ticks) >= 32
    # One job per tick, made in the transaction that recorded the tick, and no other.
    job_ids = [run.job_id for run in runs]
    assert None not in job_ids
    assert len(set(job_ids)) == len(ticks)
    assert set(Job.objects.filter(task_name=TASK).values_list("pk", flat=True)) == set(job_ids)

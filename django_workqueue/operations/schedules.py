"""Operations on cron schedules."""

from __future__ import annotations

from django.db import transaction

from ..conf import workqueue_settings as conf
from ..db import driver_for
from ..exceptions import UnknownSchedule
from ..models import Job, Schedule, ScheduleRun
from ..registry import get_task


def run_schedule_now(name: str, *, alias: str | None = None) -> Job:
    """Enqueue one run of the schedule ``name`` now, recorded as a ``ScheduleRun`` at the
    database's clock; its next tick is unchanged. Returns the job (a disabled schedule runs
    too: this is an operator's explicit request).

    >>> job = operations.run_schedule_now("nightly-report")
    """
    alias = alias or conf.DATABASE
    schedule = Schedule.objects.using(alias).filter(name=name).first()
    if schedule is None:
        raise UnknownSchedule(f"no schedule is named {name!r} (WORKQUEUE['SCHEDULES'], "
                              f"@task(cron=...) or a Schedule row)")  # fmt: skip
    task = get_task(schedule.task_name)
    if schedule.queue:
        task = task.using(queue=schedule.queue)
    with transaction.atomic(using=alias):
        job = task.enqueue(*schedule.args, **schedule.kwargs)
        ScheduleRun.objects.using(alias).create(
            schedule=schedule, fire_at=driver_for(alias).now(), job=job
        )
    return job

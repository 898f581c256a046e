"""The scheduler (``maintenance/scheduler.py``) with an injected clock: due ticks fire once,
through DST changes, clock jumps, downtimes and disabled schedules; the database clock decides."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any
from unittest import mock

import pytest

from django_workqueue.maintenance import scheduler
from django_workqueue.models import Job, Schedule, ScheduleRun
from django_workqueue.schedules import next_tick
from tests.support.database import db_now

pytestmark = pytest.mark.django_db

UTC = dt.UTC
TASK = "testproject.testapp.tasks.scheduled_tick"


def utc(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=UTC)


def make_schedule(
    cron: str = "*/5 * * * *", *, first: dt.datetime, timezone: str = "UTC", **fields: Any
) -> Schedule:
    """A schedule whose next tick is the first tick at or after ``first``."""
    next_run_at = next_tick(cron, timezone, first - dt.timedelta(microseconds=1))
    fields.setdefault("source", "runtime")
    return Schedule.objects.create(
        name=fields.pop("name", "every-five"), task_name=fields.pop("task_name", TASK),
        cron=cron, timezone=timezone, next_run_at=next_run_at, **fields,
    )  # fmt: skip


def fired(schedule: Schedule) -> list[dt.datetime]:
    return sorted(ScheduleRun.objects.filter(schedule=schedule).values_list("fire_at", flat=True))


def run_every(step: dt.timedelta, start: dt.datetime, end: dt.datetime) -> int:
    """Run the scheduler at every ``step`` from ``start`` to ``end`` (the injected clock)."""
    total, now = 0, start
    while now <= end:
        total += scheduler.run_once(now=now)
        now += step
    return total


def test_a_due_tick_enqueues_its_job_records_the_run_and_moves_to_the_next_tick():
    schedule = make_schedule(first=utc(2025, 1, 6, 10, 0), args=["a"], kwargs={}, queue="reports")
    assert scheduler.run_once(now=utc(2025, 1, 6, 10, 0, 30)) == 1
    run = ScheduleRun.objects.get(schedule=schedule)
    assert run.fire_at == utc(2025, 1, 6, 10, 0)
    job = Job.objects.get(pk=run.job_id)
    assert (job.task_name, job.args, job.queue) == (TASK, ["a"], "reports")
    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2025, 1, 6, 10, 5)
    assert schedule.last_run_at == utc(2025, 1, 6, 10, 0)


def test_a_schedule_without_a_queue_uses_its_tasks_queue():
    make_schedule(first=utc(2025, 1, 6, 10, 0), kwargs={"label": "x"})
    scheduler.run_once(now=utc(2025, 1, 6, 10, 0))
    assert list(Job.objects.values_list("queue", "kwargs")) == [("default", {"label": "x"})]


def test_a_tick_fires_once_however_many_passes_see_it():
    schedule = make_schedule(first=utc(2025, 1, 6, 10, 0))
    now = utc(2025, 1, 6, 10, 1)
    assert [scheduler.run_once(now=now) for _ in range(3)] == [1, 0, 0]
    assert fired(schedule) == [utc(2025, 1, 6, 10, 0)]
    assert Job.objects.count() == 1


def test_nothing_fires_before_the_tick():
    schedule = make_schedule(first=utc(2025, 1, 6, 10, 0))
    assert scheduler.run_once(now=utc(2025, 1, 6, 9, 59, 59)) == 0
    assert fired(schedule) == []


def test_a_tick_that_fired_already_is_not_fired_again_when_next_run_at_is_set_back():
    schedule = make_schedule(first=utc(2025, 1, 6, 10, 0))
    scheduler.run_once(now=utc(2025, 1, 6, 10, 0))
    # An operator (or a restored backup) puts the schedule back before a tick that fired.
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=utc(2025, 1, 6, 10, 0))
    assert scheduler.run_once(now=utc(2025, 1, 6, 10, 2)) == 0
    assert fired(schedule) == [utc(2025, 1, 6, 10, 0)]
    assert Job.objects.count() == 1  # the duplicate's job was rolled back with its run
    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2025, 1, 6, 10, 5)


def test_the_database_clock_decides_not_the_hosts():
    due = make_schedule(first=db_now() - dt.timedelta(minutes=10), name="due")
    later = make_schedule(first=db_now() + dt.timedelta(hours=1), name="later")
    # A host whose clock runs a day ahead (or behind) changes nothing: only the database's
    # clock is read.
    for skew in (dt.timedelta(days=1), -dt.timedelta(days=1)):
        with mock.patch("django.utils.timezone.now", return_value=db_now() + skew):
            scheduler.run_once()
    assert len(fired(due)) == 1
    assert fired(later) == []


def test_a_clock_jump_backwards_fires_nothing_twice():
    schedule = make_schedule(first=utc(2025, 1, 6, 10, 0))
    assert run_every(dt.timedelta(minutes=1), utc(2025, 1, 6, 10, 0), utc(2025, 1, 6, 10, 12)) == 3
    # The clock goes back 2 hours, then forward again past the same ticks.
    assert run_every(dt.timedelta(minutes=1), utc(2025, 1, 6, 8, 0), utc(2025, 1, 6, 8, 30)) == 0
    run_every(dt.timedelta(minutes=1), utc(2025, 1, 6, 10, 0), utc(2025, 1, 6, 10, 20))
    assert fired(schedule) == [utc(2025, 1, 6, 10, m) for m in (0, 5, 10, 15, 20)]
    assert Job.objects.count() == 5


@pytest.mark.parametrize(
    ("catch_up", "now", "expected", "next_run_at"),
    [
        # latest: one run, for the latest missed tick.
        ("latest", utc(2025, 1, 6, 13, 2), [utc(2025, 1, 6, 13, 0)], utc(2025, 1, 6, 13, 5)),
        # all: every tick of the 3 hours, 10:00 to 13:00.
        (
            "all",
            utc(2025, 1, 6, 13, 2),
            [utc(2025, 1, 6, 10, 0) + dt.timedelta(minutes=5 * n) for n in range(37)],
            utc(2025, 1, 6, 13, 5),
        ),
        # none: the latest tick is 2 minutes old (past the 60 s grace): nothing runs.
        ("none", utc(2025, 1, 6, 13, 2), [], utc(2025, 1, 6, 13, 5)),
        # none: a tick within the grace is not "missed": it runs, the older ones do not.
        ("none", utc(2025, 1, 6, 13, 0, 30), [utc(2025, 1, 6, 13, 0)], utc(2025, 1, 6, 13, 5)),
    ],
)
def test_after_three_hours_of_downtime_catch_up_decides_what_runs(
    catch_up, now, expected, next_run_at
):
    schedule = make_schedule(first=utc(2025, 1, 6, 10, 0), catch_up=catch_up)
    scheduler.run_once(now=now)
    scheduler.run_once(now=now)  # a second pass at the same moment adds nothing
    assert fired(schedule) == expected
    assert Job.objects.count() == len(expected)
    schedule.refresh_from_db()
    assert schedule.next_run_at == next_run_at


def test_catch_up_all_fires_a_long_backlog_in_batches_without_losing_a_tick():
    schedule = make_schedule("* * * * *", first=utc(2025, 1, 6, 10, 0), catch_up="all")
    now = utc(2025, 1, 6, 14, 59)  # 300 ticks: more than one transaction's batch
    while scheduler.run_once(now=now):
        pass
    assert fired(schedule) == [utc(2025, 1, 6, 10, 0) + dt.timedelta(minutes=n) for n in range(300)]


def test_a_seconds_field_fires_every_second():
    schedule = make_schedule("* * * * * *", first=utc(2025, 1, 6, 10, 0, 0), catch_up="all")
    assert scheduler.run_once(now=utc(2025, 1, 6, 10, 0, 2, 500000)) == 3
    assert fired(schedule) == [utc(2025, 1, 6, 10, 0, s) for s in (0, 1, 2)]
    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2025, 1, 6, 10, 0, 3)


def test_a_disabled_schedule_fires_nothing_and_catches_up_when_enabled_again():
    schedule = make_schedule(first=utc(2025, 1, 6, 10, 0), enabled=False)
    assert run_every(dt.timedelta(minutes=1), utc(2025, 1, 6, 10, 0), utc(2025, 1, 6, 11, 0)) == 0
    Schedule.objects.filter(pk=schedule.pk).update(enabled=True)
    assert scheduler.run_once(now=utc(2025, 1, 6, 11, 1)) == 1  # latest: one run
    assert fired(schedule) == [utc(2025, 1, 6, 11, 0)]


def test_a_runtime_schedule_without_a_next_tick_starts_at_the_next_tick():
    schedule = Schedule.objects.create(
        name="new", task_name=TASK, cron="*/5 * * * *", source="runtime"
    )
    assert scheduler.run_once(now=utc(2025, 1, 6, 10, 1)) == 0
    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2025, 1, 6, 10, 5)


def test_a_schedule_of_an_unknown_task_is_reported_and_the_others_still_fire(caplog):
    broken = make_schedule(first=utc(2025, 1, 6, 10, 0), name="broken", task_name="no.such")
    good = make_schedule(first=utc(2025, 1, 6, 10, 0), name="good")
    with caplog.at_level(logging.ERROR, logger="django_workqueue.scheduler"):
        assert scheduler.run_once(now=utc(2025, 1, 6, 10, 0)) == 1
    assert "schedule broken does not fire: task 'no.such' is not registered" in caplog.text
    assert (fired(broken), fired(good)) == ([], [utc(2025, 1, 6, 10, 0)])


def test_arguments_the_task_refuses_fire_nothing_and_are_reported(caplog):
    schedule = make_schedule(first=utc(2025, 1, 6, 10, 0), kwargs={"nope": 1})
    with caplog.at_level(logging.ERROR, logger="django_workqueue.scheduler"):
        assert scheduler.run_once(now=utc(2025, 1, 6, 10, 0)) == 0
    assert "InvalidArguments" in caplog.text
    assert (fired(schedule), Job.objects.count()) == ([], 0)
    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2025, 1, 6, 10, 0)  # still due once the row is fixed


# --- DST: ticks are computed in the schedule's zone, stored in UTC --------------------------
# Europe/Paris: 2025-03-30 02:00 CET -> 03:00 CEST (02:xx does not exist);
# 2025-10-26 03:00 CEST -> 02:00 CET (02:xx happens twice).


def test_a_daily_tick_in_the_skipped_hour_fires_once_at_three_oclock():
    # croniter moves 02:30 on the day it does not exist to 03:00 CEST (01:00 UTC).
    schedule = make_schedule("30 2 * * *", first=utc(2025, 3, 28, 12), timezone="Europe/Paris")
    run_every(dt.timedelta(minutes=10), utc(2025, 3, 28, 12), utc(2025, 4, 1, 12))
    assert fired(schedule) == [
        utc(2025, 3, 29, 1, 30),  # 02:30 CET
        utc(2025, 3, 30, 1, 0),  # 03:00 CEST: the skipped 02:30
        utc(2025, 3, 31, 0, 30),  # 02:30 CEST
        utc(2025, 4, 1, 0, 30),
    ]


def test_a_daily_tick_in_the_repeated_hour_fires_at_each_of_its_two_instants():
    # 02:30 happens twice on 2025-10-26 (CEST, then CET): croniter gives both, and each real
    # instant fires once.
    schedule = make_schedule("30 2 * * *", first=utc(2025, 10, 24, 12), timezone="Europe/Paris")
    run_every(dt.timedelta(minutes=10), utc(2025, 10, 24, 12), utc(2025, 10, 28, 12))
    assert fired(schedule) == [
        utc(2025, 10, 25, 0, 30),  # 02:30 CEST
        utc(2025, 10, 26, 0, 30),  # 02:30 CEST
        utc(2025, 10, 26, 1, 30),  # 02:30 CET, an hour later
        utc(2025, 10, 27, 1, 30),  # 02:30 CET
        utc(2025, 10, 28, 1, 30),
    ]


@pytest.mark.parametrize(
    ("start", "end"),
    [(utc(2025, 3, 29, 22), utc(2025, 3, 30, 4)), (utc(2025, 10, 25, 22), utc(2025, 10, 26, 4))],
    ids=["spring-forward", "fall-back"],
)
def test_a_half_hourly_schedule_fires_every_real_half_hour_across_a_dst_change(start, end):
    schedule = make_schedule("*/30 * * * *", first=start, timezone="Europe/Paris")
    run_every(dt.timedelta(minutes=7), start, end)
    ticks = fired(schedule)
    assert ticks == [start + dt.timedelta(minutes=30 * n) for n in range(len(ticks))]
    assert ticks[-1] == end - dt.timedelta(minutes=30)  # the 7-minute steps end at 03:57 UTC
    assert Job.objects.count() == len(ticks)


def test_a_worker_that_read_the_schedule_before_another_fired_it_changes_nothing():
    schedule = make_schedule(first=utc(2025, 1, 6, 10, 0))
    stale = Schedule.objects.get(pk=schedule.pk)  # what a slower worker read: due at 10:00
    assert scheduler.run_once(now=utc(2025, 1, 6, 13, 2)) == 1  # another worker: 13:00
    # Later, the slow worker fires what it read: its latest tick would be 13:05, which no
    # unique run refuses; the guarded next_run_at does.
    slow = scheduler.Scheduler("default", 1.0)
    assert slow._fire(stale, utc(2025, 1, 6, 13, 7)) == 0
    assert fired(schedule) == [utc(2025, 1, 6, 13, 0)]
    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2025, 1, 6, 13, 5)

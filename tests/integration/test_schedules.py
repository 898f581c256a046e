"""Declared schedules (``WORKQUEUE["SCHEDULES"]``, ``@task(cron=...)``): validation, the system
check, the sync into the Schedule table at worker start, and ``run_schedule_now``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_workqueue import operations, task
from django_workqueue.checks import check_schedules
from django_workqueue.db import driver_for
from django_workqueue.exceptions import InvalidOption, UnknownSchedule
from django_workqueue.models import Job, Schedule, ScheduleRun
from django_workqueue.registry import _registry
from django_workqueue.schedules import next_tick, sync_schedules
from django_workqueue.worker.runner import Worker
from tests.support.database import db_now
from tests.support.settings import workqueue_settings

pytestmark = pytest.mark.django_db

TASK = "testproject.testapp.tasks.scheduled_tick"
NIGHTLY = {"task": TASK, "cron": "0 3 * * *", "timezone": "Europe/Paris", "kwargs": {"label": "n"}}


@pytest.fixture
def cron_task() -> Iterator[str]:
    """A ``@task(cron=...)`` registered for one test (the registry is the process's)."""

    @task(name="tests.cleanup", cron="*/15 * * * *", timezone="Europe/Paris", catch_up="none")
    def cleanup(dry_run=False):
        return dry_run

    yield cleanup.name
    _registry.pop(cleanup.name, None)


def test_sync_creates_each_declared_schedule_with_its_next_tick(cron_task):
    with workqueue_settings(SCHEDULES={"nightly": NIGHTLY}):
        before = db_now()
        assert sync_schedules() == 2
    nightly = Schedule.objects.get(name="nightly")
    assert (nightly.task_name, nightly.cron, nightly.timezone, nightly.kwargs) == (
        TASK, "0 3 * * *", "Europe/Paris", {"label": "n"},
    )  # fmt: skip
    assert (nightly.source, nightly.enabled, nightly.catch_up) == ("settings", True, "latest")
    assert before < nightly.next_run_at <= next_tick("0 3 * * *", "Europe/Paris", before)
    cleanup = Schedule.objects.get(name=cron_task)
    assert (cleanup.task_name, cleanup.cron, cleanup.source) == (cron_task, "*/15 * * * *", "task")
    assert (cleanup.timezone, cleanup.catch_up) == ("Europe/Paris", "none")


def test_sync_keeps_the_next_tick_so_missed_ticks_are_caught_up_after_a_restart():
    with workqueue_settings(SCHEDULES={"nightly": NIGHTLY}):
        sync_schedules()
        missed = db_now() - dt.timedelta(days=2)
        Schedule.objects.filter(name="nightly").update(next_run_at=missed)
        assert sync_schedules() == 0
    assert Schedule.objects.get(name="nightly").next_run_at == missed


def test_sync_computes_a_new_next_tick_when_the_cron_changes():
    with workqueue_settings(SCHEDULES={"nightly": NIGHTLY}):
        sync_schedules()
    Schedule.objects.filter(name="nightly").update(next_run_at=db_now() - dt.timedelta(days=2))
    with workqueue_settings(SCHEDULES={"nightly": {**NIGHTLY, "cron": "0 4 * * *"}}):
        assert sync_schedules() == 1
    schedule = Schedule.objects.get(name="nightly")
    assert schedule.cron == "0 4 * * *"
    assert schedule.next_run_at > db_now() - dt.timedelta(seconds=1)


def test_sync_keeps_an_operators_disable_but_the_settings_can_disable():
    with workqueue_settings(SCHEDULES={"nightly": NIGHTLY}):
        sync_schedules()
        Schedule.objects.filter(name="nightly").update(enabled=False)  # in the admin
        sync_schedules()  # a deploy
        assert Schedule.objects.get(name="nightly").enabled is False
    Schedule.objects.filter(name="nightly").update(enabled=True)
    with workqueue_settings(SCHEDULES={"nightly": {**NIGHTLY, "enabled": False}}):
        sync_schedules()
    assert Schedule.objects.get(name="nightly").enabled is False


def test_sync_deletes_schedules_no_longer_declared_and_never_touches_runtime_ones():
    Schedule.objects.create(name="adhoc", task_name=TASK, cron="0 * * * *", source="runtime")
    with workqueue_settings(SCHEDULES={"nightly": NIGHTLY}):
        sync_schedules()
    with workqueue_settings(SCHEDULES={}):
        sync_schedules()
    assert list(Schedule.objects.values_list("name", "source")) == [("adhoc", "runtime")]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({**NIGHTLY, "task": "no.such.task"}, "task 'no.such.task' is not registered"),
        ({**NIGHTLY, "cron": "61 * * * *"}, "cron '61 * * * *' is not a valid cron expression"),
        ({**NIGHTLY, "cron": "* * *"}, "cron must be a string of 5 fields"),
        ({**NIGHTLY, "timezone": "Mars/Olympus"}, "timezone 'Mars/Olympus' is not an IANA"),
        ({**NIGHTLY, "queue": "nowhere"}, "queue 'nowhere' is not one of WORKQUEUE['QUEUES']"),
        ({**NIGHTLY, "kwargs": {"label": object()}}, "args and kwargs must be JSON"),
        ({**NIGHTLY, "kwargs": {"nope": 1}}, "unexpected keyword argument 'nope'"),
        ({**NIGHTLY, "catch_up": "some"}, "catch_up must be one of latest, all, none"),
        ({**NIGHTLY, "every": 5}, "unknown key(s) every"),
    ],
)
def test_a_bad_schedule_is_refused_by_the_check_and_the_sync(entry, problem):
    with workqueue_settings(SCHEDULES={"broken": entry}):
        errors = check_schedules()
        with pytest.raises(ImproperlyConfigured, match="SCHEDULES"):
            sync_schedules()
    assert [error.id for error in errors] == ["django_workqueue.E010"]
    assert "WORKQUEUE['SCHEDULES']['broken']" in errors[0].msg
    assert problem in errors[0].msg
    assert not Schedule.objects.exists()


def test_good_schedules_pass_the_check():
    with workqueue_settings(
        SCHEDULES={"nightly": NIGHTLY, "often": {"task": TASK, "cron": "* * * * * */10"}}
    ):
        assert check_schedules() == []


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"cron": "every day"}, "cron must be a string of 5 fields"),
        ({"cron": "0 3 * * *", "timezone": "Paris"}, "is not an IANA time zone"),
        ({"cron": "0 3 * * *", "catch_up": "twice"}, "catch_up must be one of"),
    ],
)
def test_task_refuses_a_bad_cron_option(options, problem):
    with pytest.raises(InvalidOption, match=problem):
        task(name="tests.bad_cron", **options)(lambda: None)
    assert "tests.bad_cron" not in _registry


def test_task_with_cron_refuses_parameters_without_defaults():
    with pytest.raises(InvalidOption, match="give its parameters defaults"):

        @task(name="tests.needs_args", cron="0 3 * * *")
        def needs_args(customer_id):
            return customer_id


@pytest.mark.django_db(transaction=True)
def test_a_worker_syncs_the_declared_schedules_when_it_starts():
    with workqueue_settings(SCHEDULES={"nightly": NIGHTLY}):
        Worker(burst=True, concurrency=1, poll_interval=0.05).run()
    assert Schedule.objects.filter(name="nightly", source="settings").exists()


def test_run_schedule_now_enqueues_one_run_without_moving_the_next_tick():
    later = db_now() + dt.timedelta(hours=5)
    schedule = Schedule.objects.create(
        name="adhoc", task_name=TASK, cron="0 * * * *", kwargs={"label": "now"},
        queue="reports", source="runtime", next_run_at=later, enabled=False,
    )  # fmt: skip
    clock = driver_for("default").now  # statement_timestamp(): it moves within a transaction
    before = clock()
    job = operations.run_schedule_now("adhoc")
    assert (job.task_name, job.kwargs, job.queue) == (TASK, {"label": "now"}, "reports")
    run = ScheduleRun.objects.get(schedule=schedule)
    assert run.job_id == job.pk
    assert before <= run.fire_at <= clock()
    schedule.refresh_from_db()
    assert schedule.next_run_at == later


def test_run_schedule_now_names_an_unknown_schedule():
    with pytest.raises(UnknownSchedule, match="no schedule is named 'missing'"):
        operations.run_schedule_now("missing")
    assert not Job.objects.exists()

"""One maintainer per fleet (``maintenance/maintainer.py``), on SQLite and PostgreSQL: the lease
decides who runs the services, on the database's clock; a stopping maintainer hands over at
once; an idle worker's passes cost the database little."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connections
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from django_workqueue import wakeup
from django_workqueue.maintenance.maintainer import LEASE_NAME, Maintainer
from django_workqueue.maintenance.promoter import Promoter
from django_workqueue.maintenance.scheduler import Scheduler
from django_workqueue.models import Job, MaintenanceLease, Schedule, WorkerProcess
from django_workqueue.operations import redrive, retry_job
from django_workqueue.worker.registration import Registration
from django_workqueue.worker.runner import Worker
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db

LEASE = 30.0


@pytest.fixture(autouse=True)
def short_lease():
    with workqueue_settings(MAINTENANCE_LEASE_SECONDS=LEASE):
        yield


def maintainer(owner: str) -> Maintainer:
    return Maintainer("default", owner, listening=lambda: False)


def due_scheduled_job() -> Job:
    return JobFactory(status="scheduled", run_after=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))


def holder() -> str | None:
    row = MaintenanceLease.objects.filter(pk=LEASE_NAME).first()
    return row.owner if row else None


def test_a_lone_worker_takes_the_lease_at_its_first_pass_and_maintains_at_once():
    job = due_scheduled_job()
    lone = maintainer("a")

    assert lone.run_if_due() is True  # the promoter made a job ready

    assert lone.leading and holder() == "a"
    job.refresh_from_db()
    assert job.status == "ready"


def test_of_two_would_be_maintainers_only_the_holder_runs_the_services():
    a, b = maintainer("a"), maintainer("b")
    a.run_if_due()
    job = due_scheduled_job()

    assert b.run_if_due() is False

    job.refresh_from_db()
    assert (job.status, b.leading, b.runs, holder()) == ("scheduled", False, 0, "a")
    for service in (a.promoter, a.reaper, a.scheduler):
        service.next_run = 0.0  # due for the holder (retention: test_retention.py)
    assert a.run_if_due() is True
    job.refresh_from_db()
    assert job.status == "ready"


def test_a_non_holder_comes_back_when_the_lease_would_run_out_not_before():
    maintainer("a").run_if_due()
    b = maintainer("b")
    at = time.monotonic()

    b.run_if_due(at)

    # The row says 30 s are left (by the database's clock): b reads again then, not sooner.
    assert LEASE * 0.9 <= b.next_check - at <= LEASE + 2
    assert b.next_run == b.next_check


def test_an_expired_lease_is_taken_over_by_the_databases_clock():
    a, b = maintainer("a"), maintainer("b")
    a.run_if_due()
    b.run_if_due()
    assert holder() == "a" and not b.leading
    # a stopped renewing: by the database's clock its lease ran out a second ago.
    MaintenanceLease.objects.update(expires_at=Now() - dt.timedelta(seconds=1))
    job = due_scheduled_job()

    assert b.run_if_due(b.next_check) is True

    assert holder() == "b" and b.leading
    job.refresh_from_db()
    assert job.status == "ready"


def test_a_holder_that_lost_its_lease_stops_maintaining():
    a, b = maintainer("a"), maintainer("b")
    a.run_if_due()
    MaintenanceLease.objects.update(expires_at=Now() - dt.timedelta(seconds=1))
    b.next_check = 0.0
    b.run_if_due()
    job = due_scheduled_job()

    a.run_if_due(a.next_check)  # its renewal finds b's lease

    assert not a.leading and holder() == "b"
    job.refresh_from_db()
    assert job.status == "scheduled"


def test_a_released_lease_is_taken_at_the_next_try_soon_after_the_release_is_heard():
    a, b = maintainer("a"), maintainer("b")
    a.run_if_due()
    b.run_if_due()
    assert b.next_check - time.monotonic() > LEASE / 2

    assert a.release()
    b.check_soon()  # what the NOTIFY of the release does on PostgreSQL

    assert b.next_check - time.monotonic() <= 0.5
    b.run_if_due(b.next_check)
    assert holder() == "b" and b.leading and not a.leading


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_stops_releases_the_lease(background_worker):
    worker = background_worker()
    wait_until(lambda: holder() == worker.id, message="the lone worker takes the lease")

    worker.stop()

    wait_until(lambda: holder() is None, message="the lease released")


def test_seconds_left_is_zero_for_the_holder_and_a_free_lease():
    a, b = maintainer("a"), maintainer("b")
    assert b.leadership.seconds_left() == 0.0  # no row yet
    a.run_if_due()

    assert a.leadership.seconds_left() == 0.0
    assert LEASE - 5 < b.leadership.seconds_left() <= LEASE


def test_the_promoter_tells_how_long_until_the_earliest_scheduled_job():
    promoter = Promoter("default", 1.0)
    assert promoter.seconds_to_next() is None
    JobFactory(status="scheduled", run_after=dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    JobFactory(status="scheduled", run_after=dt.datetime(2029, 1, 1, tzinfo=dt.UTC))
    now = dt.datetime(2028, 12, 31, 23, 59, tzinfo=dt.UTC)

    assert promoter.seconds_to_next(now) == 60.0


def test_the_scheduler_tells_how_long_until_the_next_tick():
    Schedule.objects.create(
        name="later", task_name="testproject.testapp.tasks.add", cron="0 0 * * *",
        next_run_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC), args=[1, 2],
    )  # fmt: skip
    scheduler = Scheduler("default", 1.0)

    assert scheduler.run_once(now=dt.datetime(2029, 12, 31, 23, 0, tzinfo=dt.UTC)) == 0

    assert scheduler.seconds_to_next == 3600.0


def test_while_listening_the_maintainers_promoter_sleeps_until_the_next_job_and_a_notify_wakes_it():
    with workqueue_settings(MAINTENANCE_IDLE_INTERVAL=10.0, PROMOTE_INTERVAL=1.0):
        listening = Maintainer("default", "a", listening=lambda: True)
        at = time.monotonic()
        listening.run_if_due(at)
        assert listening.promoter.next_run - at == pytest.approx(10.0)  # nothing scheduled

        assert listening.promote_soon()  # an enqueue somewhere: within PROMOTE_INTERVAL

        assert listening.promoter.next_run - at == pytest.approx(1.0)
        assert not listening.promote_soon()  # already that soon


def test_a_notify_heard_while_the_promoter_runs_is_not_slept_through(monkeypatch):
    with workqueue_settings(MAINTENANCE_IDLE_INTERVAL=10.0, PROMOTE_INTERVAL=1.0):
        listening = Maintainer("default", "a", listening=lambda: True)
        listening.run_if_due(time.monotonic())  # holds the lease now
        promoter = listening.promoter

        def notified_meanwhile(now=None):  # the listener thread, during the promoter's read
            listening.promote_soon()
            return None  # read before the announced job was committed: nothing scheduled

        monkeypatch.setattr(promoter, "seconds_to_next", notified_meanwhile)
        at = time.monotonic()
        listening._promote(at, listening=True)

        assert promoter.next_run - at == pytest.approx(1.0)  # not MAINTENANCE_IDLE_INTERVAL


def test_a_failing_promoter_tries_again_after_its_interval_not_at_every_pass(monkeypatch):
    with workqueue_settings(MAINTENANCE_IDLE_INTERVAL=10.0, PROMOTE_INTERVAL=1.0):
        listening = Maintainer("default", "a", listening=lambda: True)
        listening.run_if_due(time.monotonic())

        def broken(now=None):
            raise RuntimeError("the promoter's query failed")

        monkeypatch.setattr(listening.promoter, "seconds_to_next", broken)
        at = time.monotonic()
        with pytest.raises(RuntimeError):
            listening._promote(at, listening=True)

        assert listening.promoter.next_run - at == pytest.approx(1.0)  # not due at every pass


def test_an_idle_heartbeat_is_one_statement():
    registration = Registration("default", "w", ["default"], 1)
    registration.register()

    with CaptureQueriesContext(connections["default"]) as queries:
        assert registration.beat(running=0) is None

    assert len(queries) == 1


def test_a_heartbeat_still_reads_a_scale_request():
    registration = Registration("default", "w", ["default"], 1)
    registration.register()
    WorkerProcess.objects.filter(pk="w").update(requested_concurrency=4)

    assert registration.beat(running=0) == 4


@pytest.mark.django_db(transaction=True)
def test_a_pass_for_a_renewal_or_maintenance_alone_claims_nothing():
    worker = Worker(concurrency=1, poll_interval=60)
    worker._fill()  # the first pass polls

    with CaptureQueriesContext(connections["default"]) as queries:
        assert worker._fill() == 0

    assert len(queries) == 0
    worker._poll_now = True  # a wake-up: a NOTIFY, a slot coming free
    JobFactory()
    assert worker._fill() == 1


def test_the_idle_interval_setting_is_checked():
    from django_workqueue.checks import check_settings

    with workqueue_settings(MAINTENANCE_LEASE_SECONDS=0, LISTEN_POLL_INTERVAL=-1):
        messages = " ".join(m.msg for m in check_settings())
    assert "MAINTENANCE_LEASE_SECONDS" in messages and "LISTEN_POLL_INTERVAL" in messages


@pytest.fixture
def mail_woken():
    event = threading.Event()
    wakeup.register(event, ["mail"])
    yield event
    wakeup.unregister(event)


@pytest.mark.django_db(transaction=True)
def test_retry_job_and_redrive_wake_the_workers_of_the_jobs_queue(mail_woken):
    later = dt.datetime(2099, 1, 1, tzinfo=dt.UTC)
    retry_job(JobFactory(queue="mail", status="scheduled", run_after=later).pk)
    assert mail_woken.is_set()

    mail_woken.clear()
    redrive([JobFactory(queue="mail", failed=True).pk])
    assert mail_woken.is_set()


def test_the_maintainers_reaper_reaps_its_own_dropped_jobs_but_not_those_it_runs():
    # Only the maintainer reaps: a job of its own that it dropped (a claim whose answer was
    # lost, a slot that failed before the job began) must not wait for its lease to move on.
    held = maintainer("w1")
    held.run_if_due()
    assert holder() == "w1"
    running, dropped, other = (
        JobFactory(expired=True, lease_owner=owner) for owner in ("w1", "w1", "w2")
    )
    reaper = Maintainer(
        "default", "w1", listening=lambda: False, running=lambda: {running.pk}
    ).reaper

    assert reaper.run_once() == 2

    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses[running.pk] == "running"  # its lease lapsed under a lock, say: spared
    assert statuses[dropped.pk] != "running" and statuses[other.pk] != "running"


@pytest.mark.django_db(transaction=True)
@workqueue_settings(REAPER_INTERVAL=0.2)
def test_a_maintaining_worker_reaps_a_job_of_its_own_it_dropped(background_worker):
    worker = background_worker(concurrency=1)
    wait_until(lambda: holder() == worker.id, message="the worker to take the lease")
    job = JobFactory(expired=True, lease_owner=worker.id)  # leased to it, unknown to it

    wait_until(
        lambda: Job.objects.get(pk=job.pk).status != "running",
        timeout=15,
        message="the maintainer to reap its own dropped job",
    )


@pytest.mark.postgres_only  # SQLite has no row locks to wait for
@pytest.mark.django_db(transaction=True)
def test_maintenance_does_not_wait_long_for_a_row_another_session_holds():
    # The maintainer's control loop also renews its jobs' leases: a maintenance statement
    # stuck behind a lock (here the lease row, held by a session that stalls) must fail
    # within the worker's lock timeout and be retried, never wait without end.
    from django.db import OperationalError, transaction

    from django_workqueue.db import driver_for
    from django_workqueue.maintenance.leadership import Leadership

    leadership = Leadership("default", "stuck", owner="a", seconds=30)
    assert leadership.hold()
    held, release = threading.Event(), threading.Event()

    def stall() -> None:
        try:
            with transaction.atomic():
                list(MaintenanceLease.objects.select_for_update().filter(pk="stuck"))
                held.set()
                release.wait(30)
        finally:
            connections.close_all()

    staller = threading.Thread(target=stall)
    staller.start()
    try:
        assert held.wait(10)
        with pytest.raises(OperationalError) as raised:
            leadership.hold()
        assert driver_for("default").is_lock_timeout(raised.value)
    finally:
        release.set()
        staller.join(10)
    assert leadership.hold()  # and the session keeps no lock_timeout of its own
    with connections["default"].cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"

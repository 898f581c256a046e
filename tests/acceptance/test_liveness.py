"""A crash is recovered when it is seen, not when a lease runs out: with the task's lease and the
maintenance lease both at 600 s, a SIGKILLed maintainer's job is back within seconds and cron
goes on across the takeover (PostgreSQL: the session's end; SQLite: the pid on its one host).

Each test waits until the worker it kills has proved itself alive (its ``WorkerProcess`` row
shows its liveness token), as any worker does within a moment of its start; 30 s is twenty
times away from any lease. The seconds from the kill to the reaping, by the database's clock,
are printed (``-s``) for ``docs/explanation/reliability.md``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from django_workqueue.db import driver_for
from django_workqueue.maintenance.maintainer import LEASE_NAME
from django_workqueue.models import Job, MaintenanceLease, Schedule, ScheduleRun, WorkerProcess
from django_workqueue.schedules import next_tick
from django_workqueue.states import Status
from testproject.testapp.tasks import sleep_for
from tests.support.database import THIS_DATABASES_LOCKS
from tests.support.processes import RunworkerProcess, StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

LONG = 600  # seconds: the task's lease and the maintenance lease
ENV = {"WORKQUEUE_MAINTENANCE_LEASE_SECONDS": str(LONG), "WORKQUEUE_REAPER_INTERVAL": "1"}
BOUND = 30.0  # the acceptance bound, twenty times away from any lease


def holder() -> str | None:
    return MaintenanceLease.objects.filter(pk=LEASE_NAME).values_list("owner", flat=True).first()


def proved_alive(worker: RunworkerProcess) -> bool:
    return WorkerProcess.objects.filter(id=worker.worker_id).exclude(liveness="").exists()


def maintainer_among(workers: list[RunworkerProcess]) -> RunworkerProcess | None:
    owner = holder()
    return next((w for w in workers if w.worker_id == owner), None)


def ready_fleet(
    start_worker: StartWorker, count: int, env: dict[str, str] = ENV
) -> list[RunworkerProcess]:
    """``count`` workers, all started and proved alive, one of them the maintainer."""
    workers = [start_worker("--concurrency", "1", name=f"w{n}", env=env) for n in range(count)]
    for worker in workers:
        worker.wait_started()
    wait_for(lambda: all(proved_alive(w) for w in workers), alive=workers, message="liveness")
    wait_for(lambda: maintainer_among(workers), alive=workers, message="a maintainer")
    return workers


def reaped_after(job: Job, killed_at: dt.datetime) -> float:
    """Seconds from the kill to the reaping of the killed attempt (the database's clock)."""
    reaped_at = dt.datetime.fromisoformat(job.errors[0]["at"])
    return (reaped_at - killed_at).total_seconds()


def registered_at(worker: RunworkerProcess) -> dt.datetime:
    return WorkerProcess.objects.get(id=worker.worker_id).started_at


def test_a_killed_lone_maintainers_job_is_back_at_once_whatever_the_leases(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    job = sleep_for.using(lease_seconds=LONG).enqueue(seconds=1.5, marker=str(marker))
    [a] = ready_fleet(start_worker, 1)
    wait_for(lambda: marker.exists() and marker.read_text(), alive=[a], message="attempt 1")

    killed_at = driver_for("default").now()
    a.kill()  # SIGKILL: the maintenance lease and the job's lease have ~600 s left
    b = start_worker("--concurrency", "1", name="b", env=ENV)
    wait_for(
        lambda: Job.objects.get(pk=job.pk).status == Status.SUCCEEDED,
        alive=[b], timeout=BOUND, message="the job back and succeeded",
    )  # fmt: skip

    job.refresh_from_db()
    assert (job.attempt, job.result) == (2, 1.5)
    assert [(e["attempt"], e["type"]) for e in job.errors] == [(1, "LeaseExpired")]
    assert f"worker {a.worker_id} is gone" in job.errors[0]["message"]
    assert holder() == b.worker_id  # taken over, not waited out
    start_up = (registered_at(b) - killed_at).total_seconds()
    print(
        f"\nlone maintainer killed: its job reaped {reaped_after(job, killed_at):.2f} s later, "
        f"of which {start_up:.2f} s before the new worker had registered"
    )


def test_a_killed_maintainers_job_is_back_at_once_in_a_fleet_of_three(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    workers = ready_fleet(start_worker, 3)
    markers = [tmp_path / f"started-{n}" for n in range(3)]
    # One job per worker (one slot each), so that the maintainer is busy with one of them.
    jobs = [
        sleep_for.using(lease_seconds=LONG).enqueue(seconds=2.0, marker=str(marker))
        for marker in markers
    ]
    wait_for(lambda: all(m.exists() and m.read_text() for m in markers), alive=workers,
             message="every worker running a job")  # fmt: skip
    leader = maintainer_among(workers)
    assert leader is not None
    [job] = [j for j, m in zip(jobs, markers, strict=True) if int(m.read_text()) == leader.pid]

    killed_at = driver_for("default").now()
    leader.kill()
    others = [w for w in workers if w is not leader]
    wait_for(
        lambda: Job.objects.get(pk=job.pk).status == Status.SUCCEEDED,
        alive=others, timeout=BOUND, message="the maintainer's job back and succeeded",
    )  # fmt: skip

    job.refresh_from_db()
    assert job.attempt == 2
    assert f"worker {leader.worker_id} is gone" in job.errors[0]["message"]
    assert maintainer_among(others) is not None  # one of the survivors took the lease over
    assert set(
        Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)
    ) == {Status.SUCCEEDED}
    print(
        f"\nmaintainer of three killed: its job reaped {reaped_after(job, killed_at):.2f} s later"
    )


def test_every_second_cron_fires_each_tick_once_across_a_maintainers_takeover(
    start_worker: StartWorker,
) -> None:
    workers = ready_fleet(start_worker, 3)
    first = next_tick("* * * * * *", "UTC", driver_for("default").now())
    every = Schedule.objects.create(
        name="every-second", task_name="testproject.testapp.tasks.scheduled_tick",
        cron="* * * * * *", catch_up="all", source="runtime", next_run_at=first,
    )  # fmt: skip
    latest = Schedule.objects.create(
        name="every-second-latest", task_name="testproject.testapp.tasks.scheduled_tick",
        cron="* * * * * *", source="runtime", next_run_at=first,
    )  # fmt: skip

    def fired(schedule: Schedule) -> int:
        return ScheduleRun.objects.filter(schedule=schedule).count()

    wait_for(lambda: fired(every) >= 5, alive=workers, timeout=BOUND, message="5 ticks")
    leader = maintainer_among(workers)
    assert leader is not None
    leader.kill()  # perhaps in the middle of firing a tick
    alive = [w for w in workers if w is not leader]
    alive.append(start_worker("--concurrency", "1", name="replacement", env=ENV))
    before = fired(every), fired(latest)
    wait_for(lambda: fired(every) >= before[0] + 10 and fired(latest) >= before[1] + 5,
             alive=alive, timeout=BOUND, message="ticks after the takeover")  # fmt: skip
    Schedule.objects.filter(pk__in=[every.pk, latest.pk]).update(enabled=False)

    ticks = list(
        ScheduleRun.objects.filter(schedule=every).order_by("fire_at").values_list("fire_at", "job")
    )
    # catch_up="all": every second from the first tick on, each once, with one job each.
    assert [tick for tick, _ in ticks] == [
        first + dt.timedelta(seconds=n) for n in range(len(ticks))
    ]
    assert len({job for _, job in ticks}) == len(ticks)
    # The default (latest): the ticks missed during the takeover fire as one, none twice.
    latest_ticks = list(
        ScheduleRun.objects.filter(schedule=latest)
        .order_by("fire_at")
        .values_list("fire_at", flat=True)
    )
    assert len(set(latest_ticks)) == len(latest_ticks)
    assert all(tick.microsecond == 0 and tick >= first for tick in latest_ticks)


def standbys() -> list[str]:
    """The worker ids whose LISTEN session holds a standby key (PostgreSQL)."""
    from django.db import connection

    from django_workqueue.db.pg_liveness import STANDBY_CLASS

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s"
            " AND l.objsubid = 2" + THIS_DATABASES_LOCKS + " ORDER BY 1",
            [STANDBY_CLASS],
        )
        return [name.removeprefix("workqueue:") for (name,) in cursor.fetchall()]


@pytest.mark.postgres_only
def test_with_one_standby_it_takes_over_and_the_third_worker_takes_its_slot(
    start_worker: StartWorker,
) -> None:
    workers = ready_fleet(start_worker, 3, env={**ENV, "WORKQUEUE_MAINTAINER_STANDBYS": "1"})
    leader = maintainer_among(workers)
    assert leader is not None

    # The maintainer gave its slot up (if it had one): one standby, not the maintainer.
    def one_standby_not_the_maintainer() -> list[str] | None:
        ids = standbys()
        return ids if len(ids) == 1 and leader.worker_id not in ids else None

    [standby_id] = wait_for(one_standby_not_the_maintainer, alive=workers, message="one standby")
    [standby] = [w for w in workers if w.worker_id == standby_id]
    [third] = [w for w in workers if w not in (leader, standby)]

    # Its lease has ~600 s left: only the standby (its watch, or its look again at a leader
    # that showed no token yet) can hand it over now.
    leader.kill()

    wait_for(lambda: holder() == standby.worker_id, alive=[standby, third], timeout=BOUND,
             message="the standby to take over")  # fmt: skip
    # The new maintainer gave its slot up with a NOTIFY: the third worker, which had no watch,
    # takes it and watches the new maintainer.
    wait_for(lambda: standbys() == [third.worker_id], alive=[standby, third], timeout=BOUND,
             message="the third worker in the freed slot")  # fmt: skip

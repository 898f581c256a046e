"""A real ``runworker --burst``: what it says per job, and when it exits (``--wait-scheduled``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from django_workqueue.models import Job
from testproject.testapp.tasks import add, flaky, retry_later
from tests.support.database import fresh
from tests.support.processes import run_manage

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_a_burst_worker_says_one_line_per_ending_and_counts_jobs_and_attempts(
    worker_env: Callable[..., dict[str, str]],
) -> None:
    ok = add.enqueue(2, 3)
    retried = flaky.enqueue(succeed_on=2)  # backoff=0: retried at once, in the same burst
    done = run_manage(["runworker", "--burst"], worker_env())
    assert done.returncode == 0, done.stderr
    assert f"#{ok.pk} {add.name} succeeded in " in done.stderr
    assert f"#{retried.pk} {flaky.name} failed (attempt 1/4, retry in 0 ms): " in done.stderr
    assert f"#{retried.pk} {flaky.name} succeeded in " in done.stderr
    assert "Traceback" not in done.stderr  # only at -v 2
    assert "stopped after 3 attempts: 2 jobs finished (2 succeeded), 1 to run again" in (
        done.stdout
    )
    verbose = flaky.enqueue(succeed_on=2)
    done = run_manage(["runworker", "--burst", "-v", "2"], worker_env())
    assert f"#{verbose.pk} {flaky.name} failed (attempt 1/4" in done.stderr
    assert "Traceback (most recent call last)" in done.stderr


def test_plain_burst_exits_with_a_retry_scheduled_wait_scheduled_runs_it(
    worker_env: Callable[..., dict[str, str]],
) -> None:
    job = retry_later.enqueue(delay=1)  # fails on attempt 1, retried 1 s later, succeeds
    done = run_manage(["runworker", "--burst"], worker_env())
    assert done.returncode == 0, done.stderr
    assert (fresh(job).status, fresh(job).attempt) == ("scheduled", 1)

    done = run_manage(["runworker", "--burst", "--wait-scheduled", "60"], worker_env())
    assert done.returncode == 0, done.stderr
    assert (fresh(job).status, fresh(job).attempt) == ("succeeded", 2)


def test_wait_scheduled_does_not_wait_past_its_horizon(
    worker_env: Callable[..., dict[str, str]],
) -> None:
    job = add.using(delay=3600).enqueue(1, 1)
    done = run_manage(["runworker", "--burst", "--wait-scheduled", "60"], worker_env())
    assert done.returncode == 0, done.stderr
    assert fresh(job).status == "scheduled"
    assert Job.objects.filter(status="succeeded").count() == 0


def test_wait_scheduled_needs_burst(worker_env: Callable[..., dict[str, str]]) -> None:
    done = run_manage(["runworker", "--wait-scheduled", "5"], worker_env())
    assert done.returncode == 1
    assert "--wait-scheduled only changes when a --burst worker exits; add --burst" in done.stderr

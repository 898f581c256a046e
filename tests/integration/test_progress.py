"""Progress reports with details: throttled per job, the last one always stored, and the
``job_progress`` signal on every report (SQLite and PostgreSQL)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from django_workqueue import InvalidProgress
from django_workqueue.context import JobContext
from django_workqueue.db import ClaimedJob, driver_for
from django_workqueue.models import Job
from django_workqueue.signals import job_progress
from django_workqueue.worker.completer import Completer
from tests.support.database import fresh
from tests.support.factories import JobFactory
from tests.support.observability_tasks import reports_often
from tests.support.settings import workqueue_settings

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "worker-a"


@pytest.fixture
def progress_writes(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """Every ``Driver.write_progress`` call's reports, whatever driver instance makes it."""
    calls: list[list[Any]] = []
    driver_class = type(driver_for("default"))
    original = driver_class.write_progress

    def counting(self: Any, owner: str, reports: Any, **kwargs: Any) -> Any:
        calls.append(list(reports))
        return original(self, owner, reports, **kwargs)

    monkeypatch.setattr(driver_class, "write_progress", counting)
    return calls


def test_a_thousand_reports_cost_one_write_per_interval_and_the_last_lands(
    drain: Any, progress_writes: list[list[Any]]
) -> None:
    with workqueue_settings(PROGRESS_INTERVAL=3600):
        job = reports_often.enqueue(1000)
        drain(concurrency=1)
    job = fresh(job)
    assert job.status == "succeeded"
    # The first report may be written at once; every later one waits for the interval, so
    # only the last one is written, with the outcome.
    assert len(progress_writes) <= 1
    assert (job.progress_current, job.progress_total, job.progress_message) == (
        1000, 1000, "row 1000",
    )  # fmt: skip
    assert job.progress_details == {"row": 1000, "last": [1000, "ok"]}


def test_a_report_past_its_interval_is_written_while_the_job_runs() -> None:
    job = JobFactory(running=True, lease_owner=OWNER)
    context = JobContext(
        _claimed(job), owner=OWNER, driver=driver_for("default"), on_progress=lambda c: None
    )
    completer = Completer(driver_for("default"), OWNER)
    with workqueue_settings(PROGRESS_INTERVAL=3600):
        context.set_progress(1, 3, details={"step": "one"})
        assert completer.report(context) is True  # never written: due now
        completer.write_progress()
        context.set_progress(2, 3, details={"step": "two"})
        assert completer.report(context) is False  # within the interval: waits its turn
        completer.write_progress()
    assert fresh(job).progress_details == {"step": "one"}
    with workqueue_settings(PROGRESS_INTERVAL=1e-9):  # the interval is over
        assert completer.report(context) is True
        completer.write_progress()
    job = fresh(job)
    assert (job.progress_current, job.progress_details) == (2, {"step": "two"})


def _claimed(job: Job) -> ClaimedJob:
    """The running ``job`` as a claim returned it."""
    return ClaimedJob(
        job.pk, job.task_name, job.queue, 0, job.attempt, 3, 0, 60, None, False, "[[], {}]"
    )


def test_outside_a_worker_a_report_is_written_at_once_with_its_details() -> None:
    job = JobFactory(running=True, lease_owner=OWNER)
    context = JobContext(_claimed(job), owner=OWNER, driver=driver_for("default"))
    assert context.set_progress(3, 9, "m", details={"a": {"b": [1, None, "é"]}}) is True
    job = fresh(job)
    assert job.progress_details == {"a": {"b": [1, None, "é"]}}
    context.set_progress(4)  # a report replaces the previous one whole
    job = fresh(job)
    assert (job.progress_current, job.progress_total, job.progress_details) == (4, None, None)


@pytest.mark.parametrize(
    ("details", "names"),
    [
        (["not", "an", "object"], "JSON object"),
        ({"when": object()}, "details"),
        ({"text": "nul\x00"}, "NUL"),
        ({"blob": "x" * 9000}, "8,192"),
    ],
)
def test_details_that_are_not_a_small_json_object_are_refused(details: Any, names: str) -> None:
    job = JobFactory(running=True, lease_owner=OWNER)
    context = JobContext(_claimed(job), owner=OWNER, driver=driver_for("default"))
    with pytest.raises(InvalidProgress, match=names):
        context.set_progress(1, details=details)
    assert fresh(job).progress_details is None


def test_the_stored_details_do_not_change_when_the_task_changes_its_dict() -> None:
    job = JobFactory(running=True, lease_owner=OWNER)
    reports: list[JobContext] = []
    context = JobContext(
        _claimed(job), owner=OWNER, driver=driver_for("default"), on_progress=reports.append
    )
    details = {"done": 1}
    context.set_progress(1, details=details)
    details["done"] = 99
    context.write_progress()
    assert fresh(job).progress_details == {"done": 1}


def test_every_report_sends_job_progress_and_a_raising_receiver_is_logged(
    drain: Any, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        received.append({"sender": sender, **kwargs})

    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    job_progress.connect(receiver)
    job_progress.connect(broken)
    try:
        with workqueue_settings(PROGRESS_INTERVAL=3600), caplog.at_level(logging.ERROR):
            job = reports_often.enqueue(5)
            drain(concurrency=1)
    finally:
        job_progress.disconnect(receiver)
        job_progress.disconnect(broken)
    assert fresh(job).status == "succeeded"
    assert [r["current"] for r in received] == [1, 2, 3, 4, 5]  # not throttled
    assert received[-1] == {
        "sender": reports_often, "signal": job_progress, "job_id": job.pk,
        "task_name": reports_often.name, "attempt": 1, "current": 5, "total": 5,
        "message": "row 5", "details": {"row": 5, "last": [5, "ok"]},
    }  # fmt: skip
    assert sum("job_progress receiver" in r.getMessage() for r in caplog.records) == 5

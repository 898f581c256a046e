"""Why isn't this job running? ``operations.explain``: one reason per row of ``REASONS``, on
both databases, and the API's ``GET jobs/{id}/explain/`` (view_job; masked without payload)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from django_workqueue import audit, operations
from django_workqueue.context import JobContext
from django_workqueue.db import driver_for
from django_workqueue.disclosure import Clearance
from django_workqueue.exceptions import WaitingForSignal
from django_workqueue.models import AuditSource, Checkpoint, FlowLimit, Job, WorkerProcess
from django_workqueue.operations.explain import REASONS
from django_workqueue.states import Status
from testproject.testapp.flow_tasks import one_per_customer, twenty_a_second
from testproject.testapp.tasks import add
from tests.support import durable_tasks
from tests.support.api import API, basic
from tests.support.factories import JobFactory
from tests.support.flow import flow_tasks
from tests.support.users import VIEWER, user_with

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

NO_PAYLOAD = Clearance(payload=False, tracebacks=False)


def codes(job: Job, **options) -> list[str]:
    return [reason.code for reason in operations.explain(job, **options).reasons]


@pytest.fixture(autouse=True)
def registered_flow_tasks() -> Iterator[None]:
    """The flow-controlled tasks are registered only while a test uses them (tests/support/
    flow.py): the limit reason reads the task's limits from the registry."""
    with flow_tasks():
        yield


@pytest.fixture
def live_worker() -> WorkerProcess:
    """A live worker serving every queue (so that no_worker does not join each answer)."""
    return WorkerProcess.objects.create(
        id="worker-a", host="web-1", pid=4242, queues=[], concurrency=4
    )


def reason(job: Job, code: str, **options):
    [found] = [r for r in operations.explain(job, **options).reasons if r.code == code]
    return found


def test_every_row_of_the_table_has_a_test_here():
    tested = {
        "finished", "running", "held", "scheduled", "prerequisites", "queue_paused", "limit",
        "no_worker", "not_registered", "behind", "ready", "signal",
    }  # fmt: skip
    assert {row.code for row in REASONS} == tested


def test_a_ready_job_with_nothing_in_its_way_is_next_in_line(live_worker):
    job = add.enqueue(1, 2)
    answer = operations.explain(job)
    assert codes(job) == ["ready"]
    assert answer.summary == (
        "Not running: ready: a worker serving default claims it at its next free slot."
    )


def test_scheduled_says_until_when(live_worker):
    job = add.using(delay=3600).enqueue(1, 2)
    found = reason(job, "scheduled")
    assert found.details["run_after"] == Job.objects.get(pk=job.pk).run_after.isoformat()
    assert "scheduled to run at " in found.message and "(in 60 min)" in found.message


@pytest.mark.django_db(transaction=True)  # the wait refuses to park inside a transaction
def test_waiting_says_for_which_signal_since_when_and_until_when(live_worker):
    job = JobFactory(task_name=durable_tasks.waits_for_approval.name)
    driver = driver_for("default")
    context = JobContext(driver.claim_job(job.pk, "w"), owner="w", driver=driver)
    with pytest.raises(WaitingForSignal):
        context.wait_for_signal("approve", timeout=3600)
    Job.objects.filter(pk=job.pk).update(status=Status.WAITING, lease_owner=None)
    wait = Checkpoint.objects.get(job=job, kind=Checkpoint.Kind.WAIT)

    found = reason(Job.objects.get(pk=job.pk), "signal")

    assert found.details["signal"] == "approve"
    assert found.details["times_out_at"] == wait.wakes_at.isoformat()
    assert found.message == (
        f"waiting for signal 'approve' since {wait.created_at.isoformat()}, times out at "
        f"{wait.wakes_at.isoformat()}"
    )


def test_held_names_who_held_it_from_the_audit_trail(live_worker):
    job = add.enqueue(1, 2)
    operations.hold_job(job)
    audit.record(None, "hold", {"ids": [job.pk]}, 1, AuditSource.CLI)
    found = reason(Job.objects.get(pk=job.pk), "held")
    assert found.details["by"] == "system" and found.details["at"]
    assert found.message.startswith("held by an operator, system (cli) at ")


def test_held_without_an_audit_record_says_so(live_worker):
    job = add.enqueue(1, 2)
    operations.hold_job(job)
    found = reason(Job.objects.get(pk=job.pk), "held")
    assert found.details["by"] is None and "no audit record names this job" in found.message


def test_a_paused_queue(live_worker):
    job = add.enqueue(1, 2)
    operations.pause_queue("default")
    assert reason(job, "queue_paused").message.startswith("its queue default is paused since ")


def test_blocked_by_prerequisites_lists_them_with_their_statuses(live_worker):
    first = add.using(delay=3600).enqueue(1, 1)
    job = add.using(depends_on=[first]).enqueue(2, 2)
    found = reason(job, "prerequisites")
    assert found.details["prerequisites"] == [
        {"id": first.pk, "task_name": add.name, "status": "scheduled"}
    ]
    assert f"#{first.pk} {add.name} (scheduled)" in found.message


def test_a_held_job_names_its_open_prerequisites_as_a_blocked_one_does(live_worker):
    first = add.using(delay=3600).enqueue(1, 1)
    job = add.using(depends_on=[first]).enqueue(2, 2)
    operations.hold_job(job)
    assert codes(Job.objects.get(pk=job.pk))[:2] == ["held", "prerequisites"]
    operations.complete_job(first, 2)  # none open any more: only the hold is said
    assert "prerequisites" not in codes(Job.objects.get(pk=job.pk))


def test_waiting_for_a_concurrency_limit_names_the_key_and_who_holds_it(live_worker):
    holder = one_per_customer.enqueue(7)
    Job.objects.filter(pk=holder.pk).update(
        status=Status.RUNNING, lease_owner="worker-a", attempt=1, started_at=timezone.now(),
        lease_expires_at=timezone.now() + dt.timedelta(seconds=60),
    )  # fmt: skip
    job = one_per_customer.enqueue(7)
    found = reason(job, "limit")
    assert found.details["key"] == f"limit:{one_per_customer.name}:customer:7"
    assert [h["id"] for h in found.details["running"]] == [holder.pk]
    assert f"its 1 place(s) are held by #{holder.pk}" in found.message
    masked = reason(job, "limit", clearance=NO_PAYLOAD)
    assert masked.details["key"] == f"limit:{one_per_customer.name}:(hidden)"
    assert "customer:7" not in masked.message


def test_waiting_for_a_rate_limit_says_when_the_window_frees(live_worker):
    job = twenty_a_second.enqueue()
    now = time.time()
    FlowLimit.objects.create(key=job.flow_key, starts=[[now - 0.5, 15], [now - 0.2, 5]])
    found = reason(job, "limit")
    assert found.details["rate"] == {"count": 20, "period": 1.0, "used": 20}
    frees = dt.datetime.fromisoformat(found.details["frees_at"]).timestamp()
    assert frees == pytest.approx(now + 0.5, abs=0.01)
    assert "20 of 20 starts per 1 s used, the window frees at " in found.message


def test_no_live_worker_serves_its_queue_says_when_one_last_did():
    job = add.enqueue(1, 2)
    assert reason(job, "no_worker").details["last_seen_at"] is None
    stale = WorkerProcess.objects.create(
        id="gone", host="web-2", pid=1, queues=["default"], concurrency=1
    )
    WorkerProcess.objects.filter(pk=stale.pk).update(
        last_seen_at=timezone.now() - dt.timedelta(hours=1)
    )
    WorkerProcess.objects.create(id="mail-only", host="web-3", pid=2, queues=["mail"],
                                 concurrency=1)  # fmt: skip
    found = reason(job, "no_worker")
    assert (
        found.details["last_seen_at"]
        == WorkerProcess.objects.get(pk="gone").last_seen_at.isoformat()
    )
    assert "the last one that did was seen at" in found.message


def test_a_task_unknown_here_or_to_the_worker_that_claimed_it(live_worker):
    unknown = JobFactory(task_name="removed.module.task")
    found = reason(unknown, "not_registered")
    assert found.details["registered_here"] is False
    assert "workers record their queues, not their tasks" in found.message
    failed_there = JobFactory(
        errors=[{"attempt": 1, "at": "", "type": "django_workqueue.exceptions.TaskNotRegistered",
                 "message": "no task", "traceback": None}],
    )  # fmt: skip
    assert reason(failed_there, "not_registered").details["last_attempt_not_registered"]


def test_behind_jobs_of_higher_priority(live_worker):
    add.using(priority=5).enqueue(1, 1)
    add.using(priority=5).enqueue(1, 1)
    job = add.enqueue(2, 2)
    found = reason(job, "behind")
    assert found.details["higher_priority"] == 2
    assert "ready" not in codes(job)


def test_a_running_job_names_its_worker_and_lease(live_worker):
    job = JobFactory(running=True)
    answer = operations.explain(job)
    assert codes(job) == ["running"] and answer.running
    assert answer.summary.startswith(
        "It is claimed and running on worker worker-a (web-1, pid 4242) since "
    )
    assert "lease until" in answer.summary


def test_a_finished_job_says_how_it_ended_redacted_without_payload():
    job = JobFactory(failed=True)
    answer = operations.explain(job)
    assert codes(job) == ["finished"] and answer.finished
    assert answer.summary.startswith("It failed (dead-lettered) at ")
    assert answer.summary.endswith("after attempt 3 of 3: builtins.ValueError: boom.")
    Job.objects.filter(pk=job.pk).update(
        errors=[{"attempt": 1, "at": "", "type": "builtins.ValueError",
                 "message": "login failed: password=hunter2", "traceback": "secret frames"}]
    )  # fmt: skip
    job.refresh_from_db()
    assert "hunter2" in operations.explain(job).summary
    masked = operations.explain(job, clearance=NO_PAYLOAD)
    assert "hunter2" not in str(masked.as_dict()) and "secret frames" not in str(masked.as_dict())
    succeeded = JobFactory(
        status=Status.SUCCEEDED, attempt=1, attempts_charged=1, finished_at=timezone.now()
    )
    assert operations.explain(succeeded).summary.endswith("after attempt 1 of 3.")


def test_the_api_explains_with_view_job_and_masks_without_payload(live_worker):
    from rest_framework.test import APIClient

    holder = one_per_customer.enqueue(7)
    Job.objects.filter(pk=holder.pk).update(status=Status.RUNNING, lease_owner="worker-a")
    job = one_per_customer.enqueue(7)
    user_with(*VIEWER, username="viewer")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic("viewer"))
    response = client.get(f"{API}jobs/{job.pk}/explain/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["job"] == job.pk and body["status"] == "ready" and not body["running"]
    [limit] = [r for r in body["reasons"] if r["code"] == "limit"]
    assert limit["details"]["key"] == f"limit:{one_per_customer.name}:(hidden)"
    assert "customer:7" not in response.content.decode()
    assert client.get(f"{API}jobs/999999/explain/").status_code == 404
    user_with(username="nobody")
    client.credentials(HTTP_AUTHORIZATION=basic("nobody"))
    assert client.get(f"{API}jobs/{job.pk}/explain/").status_code == 403


def test_the_cli_explains_as_text_and_json_with_the_users_clearance(live_worker):
    import json

    from tests.support.commands import run_workqueue

    job = add.using(delay=3600).enqueue(1, 2)
    code, out, _ = run_workqueue("explain", str(job.pk))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"job {job.pk} is scheduled: why it is not running"
    assert lines[1].startswith("  - scheduled to run at ")
    code, out, _ = run_workqueue("explain", str(job.pk), "--json")
    assert code == 0 and json.loads(out) == operations.explain(job).as_dict()

    holder = one_per_customer.enqueue(7)
    Job.objects.filter(pk=holder.pk).update(status=Status.RUNNING, lease_owner="worker-a")
    limited = one_per_customer.enqueue(7)
    user_with(*VIEWER, username="viewer")
    code, out, _ = run_workqueue("--user", "viewer", "explain", str(limited.pk), "--json")
    assert code == 0 and "customer:7" not in out
    user_with(username="nobody")
    code, _, error = run_workqueue("--user", "nobody", "explain", str(limited.pk))
    assert code != 0 and "view" in error
    code, _, error = run_workqueue("explain", "999999")
    assert code != 0 and error == "there is no job 999999"


def test_the_admin_job_page_has_the_explanation_masked_without_payload(live_worker):
    from django.test import Client

    holder = one_per_customer.enqueue(7)
    Job.objects.filter(pk=holder.pk).update(status=Status.RUNNING, lease_owner="worker-a")
    job = one_per_customer.enqueue(7)
    client = Client()
    client.force_login(user_with(*VIEWER, username="viewer", is_staff=True))
    page = client.get(f"/admin/django_workqueue/job/{job.pk}/change/").content.decode()
    assert "<h2>Why isn't it running?</h2>" in page
    assert f"its 1 place(s) are held by #{holder.pk}" in page
    assert f"limit:{one_per_customer.name}:(hidden)" in page and "customer:7" not in page

    running = Client()
    running.force_login(User.objects.create_superuser("root", "root@example.com", "x"))
    page = running.get(f"/admin/django_workqueue/job/{holder.pk}/change/").content.decode()
    assert "Where it runs" in page and "claimed and running on worker worker-a" in page

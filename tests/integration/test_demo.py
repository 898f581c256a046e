"""``manage.py demo``: every job it enqueues ends in the status the demo's story promises."""

from __future__ import annotations

from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command

from django_workqueue.models import Dependency, Job, Workflow
from testproject.demo.management.commands.demo import FULL_RUN_JOBS, PREFIX, clip
from testproject.demo.management.commands.demo import Command as DemoCommand
from tests.support.processes import REPO_ROOT


def _jobs(task: str) -> list[Job]:
    return list(Job.objects.filter(task_name=PREFIX + task).order_by("id"))


@pytest.mark.django_db(transaction=True)
def test_demo_runs_every_job_to_a_terminal_status() -> None:
    out = StringIO()
    call_command("demo", "--quick", "--concurrency", "3", stdout=out)

    jobs = Job.objects.filter(task_name__startswith=PREFIX)
    assert jobs.count() == 25  # 15 jobs, and a workflow of 8 that adds 2 at run time
    assert not jobs.active().exists()
    assert Counter(jobs.values_list("status", flat=True)) == {
        "succeeded": 21,
        "failed": 2,
        "cancelled": 2,
    }

    receipts = _jobs("send_receipt")
    assert [(j.status, j.attempt) for j in receipts] == [
        ("succeeded", 1),
        ("succeeded", 2),  # the flaky one: failed once, retried
        ("succeeded", 1),
    ]
    assert receipts[1].errors[0]["type"] == "builtins.ConnectionResetError"
    # The receipt enqueued in a rolled-back transaction was never stored.
    assert not Job.objects.filter(kwargs__order_id=9999).exists()

    upstream = _jobs("call_upstream")
    assert [(j.status, j.attempt, len(j.errors)) for j in upstream] == [
        ("succeeded", 2, 1),
        ("succeeded", 3, 2),
    ]

    (discarded,) = _jobs("sync_contact")
    assert (discarded.status, discarded.attempt) == ("failed", 1)
    assert discarded.errors[-1]["type"] == "django_workqueue.exceptions.Discard"
    (poison,) = _jobs("import_legacy_feed")
    assert (poison.status, poison.attempt, len(poison.errors)) == ("failed", 3, 3)

    (snoozed,) = _jobs("wait_for_upload")
    assert (snoozed.status, snoozed.attempt, snoozed.max_attempts) == ("succeeded", 2, 1)
    assert snoozed.attempts_charged == 1  # the snooze spent nothing, the success one
    assert snoozed.errors == []

    daily, quarterly = _jobs("build_report")
    assert (daily.status, daily.attempt, daily.result) == (
        "succeeded", 1, {"report": "daily-sales", "sections": 4},
    )  # fmt: skip
    assert (quarterly.status, quarterly.attempt) == ("cancelled", 0)
    (export,) = _jobs("export_archive")
    assert (export.status, export.attempt) == ("cancelled", 1)
    assert 3 <= export.progress_current < export.progress_total

    (rates,) = _jobs("fetch_exchange_rates")
    assert (rates.status, rates.result) == ("succeeded", {"currency": "USD", "EUR": 1.0})
    images = _jobs("resize_image")
    assert [(j.status, j.progress_current, j.progress_total) for j in images] == [
        ("succeeded", 4, 4),
        ("succeeded", 4, 4),
    ]

    text = out.getvalue()
    assert "rows stored = 0" in text
    assert "enqueued twice with one unique_key -> the same job" in text
    assert "Summary" in text
    assert "  total                          25         21          2          2" in text
    assert "Dead-letter queue: 2 failed job(s)" in text
    assert "Discard: contact 4711 was deleted upstream" in text
    assert "25 of 25 jobs finished in" in text


def _steps(workflow: Workflow, task: str) -> list[Job]:
    return list(workflow.jobs.filter(task_name=PREFIX + task).order_by("id"))


@pytest.mark.django_db(transaction=True)
def test_demo_workflow_fans_out_fans_in_and_waits_for_the_approval() -> None:
    out = StringIO()
    call_command("demo", "--quick", "--concurrency", "3", stdout=out)

    (workflow,) = Workflow.objects.all()
    assert (workflow.status, workflow.counts) == (
        "succeeded", {"total": 10, "open": 0, "succeeded": 10, "failed": 0, "cancelled": 0},
    )  # fmt: skip
    renders = _steps(workflow, "render_photo")
    (gallery,) = _steps(workflow, "build_gallery")
    (approval,) = _steps(workflow, "auto_reject")
    (publish,) = _steps(workflow, "publish_product")
    (close,) = _steps(workflow, "close_launch")
    # Fan-in: the chord's callback received the three renders' results, as a list.
    assert [r.status for r in renders] == ["succeeded"] * 3
    assert Dependency.objects.filter(job=gallery).count() == 3
    assert gallery.result == {"sku": "sku-42", "photos": 3}
    # The approval never ran: complete_job ended it with the manager's answer, and that
    # released publish_product, which started only then and received both values.
    assert (approval.status, approval.attempt, approval.result) == (
        "succeeded", 0, {"approved_by": "demo manager"},
    )  # fmt: skip
    assert publish.started_at >= approval.finished_at
    assert publish.result == "sku-42: 3 photos, approved by demo manager"
    edges = Dependency.objects.filter(job=publish).order_by("position")
    assert [e.prerequisite_id for e in edges] == [gallery.pk, approval.pk]
    # Run-time fan-out: announce added two mails; the last step waited for them too.
    mails = _steps(workflow, "notify_subscriber")
    assert [m.result for m in mails] == ["fan1@example.com", "fan2@example.com"]
    waited = Dependency.objects.filter(job=close).order_by("position")
    assert [e.prerequisite_id for e in waited][1:] == [m.pk for m in mails]
    assert workflow.result == close.result == {"sku": "sku-42", "announced": 2, "mailed": 2}

    text = out.getvalue()
    assert f"complete_job(#{approval.pk} auto_reject" in text
    assert f"publish_product #{publish.pk} is ready now" in text
    assert f'Workflow #{workflow.pk} "launch sku-42": succeeded' in text
    assert f"#{publish.pk:<5}publish_product    succeeded  #{gallery.pk} #{approval.pk}" in text


@pytest.mark.django_db(transaction=True)
def test_demo_starts_from_a_clean_slate_and_leaves_other_jobs_alone() -> None:
    from testproject.testapp.tasks import add

    other = add.using(delay=3600).enqueue(1, 2)
    call_command("demo", "--quick", stdout=StringIO())
    first_ids = set(Job.objects.filter(task_name__startswith=PREFIX).values_list("id", flat=True))

    out = StringIO()
    call_command("demo", "--quick", stdout=out)

    assert "Removed 25 job(s) left by an earlier demo run." in out.getvalue()
    second_ids = set(Job.objects.filter(task_name__startswith=PREFIX).values_list("id", flat=True))
    assert len(second_ids) == 25
    assert Workflow.objects.count() == 1  # the earlier run's workflow went with its jobs
    assert not first_ids & second_ids
    other.refresh_from_db()
    assert (other.status, other.attempt) == ("scheduled", 0)


@pytest.mark.django_db(transaction=True)
def test_the_readme_and_the_help_say_how_many_jobs_a_full_run_has() -> None:
    call_command("demo", "--concurrency", "4", stdout=StringIO())

    jobs = Job.objects.filter(task_name__startswith=PREFIX)
    assert jobs.count() == FULL_RUN_JOBS
    assert not jobs.active().exists()
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    assert f"run the demo ({FULL_RUN_JOBS} jobs:" in readme
    assert f"Enqueue {FULL_RUN_JOBS} demo jobs" in DemoCommand.help


def test_a_long_log_line_is_cut_at_a_words_end() -> None:
    line = "  log WARNING job 28 attempt 1 of 3 failed: SMTP server reset the connection"

    assert clip(line, 200) == line
    assert clip(line, 70) == "  log WARNING job 28 attempt 1 of 3 failed: SMTP server reset the…"
    assert len(clip(line, 70)) <= 70
    assert clip("x" * 50, 20) == "x" * 19 + "…"  # one long word: cut where it must be

"""``manage.py workqueue`` on SQLite and PostgreSQL, driven with real jobs (enqueued, run by a
worker, failed, held, paused): its output against golden files, its ``--json`` parsed, its exit
status (0 done, 1 nothing to change, 2 an error).

Ids and times are made deterministic: sequences are reset for each test and the rows' times
are set to fixed values once the worker is done. ``WORKQUEUE_UPDATE_GOLDEN=1`` rewrites the
golden files (review the diff).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path

import pytest

from django_workqueue import operations
from django_workqueue.models import AuditRecord, Job, Queue, WorkerProcess
from testproject.testapp.tasks import add, always_fails, send_mail
from tests.support.commands import run_workqueue

pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True)

GOLDEN = Path(__file__).parent / "golden" / "workqueue"
T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


run = run_workqueue


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("WORKQUEUE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file"


@pytest.fixture
def scene(drain, monkeypatch):
    """1, 2 succeeded; 3 failed (three attempts); 4 ready in mail; 5 scheduled; 6 held;
    queue reports paused; one live worker."""
    monkeypatch.setenv("COLUMNS", "120")
    add.enqueue(1, 2), add.enqueue(20, 22), always_fails.enqueue()
    drain(queues=["default"])
    send_mail.enqueue("ops@example.com", subject="hello")
    add.using(delay=3600).enqueue(5, 5)
    held = add.enqueue(6, 6)
    operations.hold_job(held)
    operations.pause_queue("reports")
    Job.objects.update(enqueued_at=T0, run_after=T0)
    Job.objects.filter(finished_at__isnull=False).update(
        started_at=T0 + dt.timedelta(seconds=1), finished_at=T0 + dt.timedelta(seconds=2)
    )
    failed = Job.objects.get(pk=3)
    failed.errors = [{**error, "at": T0.isoformat(), "traceback": "Traceback: boom"}
                     for error in failed.errors]  # fmt: skip
    failed.save(update_fields=["errors"])
    WorkerProcess.objects.all().delete()  # the drain's own row, if any
    WorkerProcess.objects.create(
        id="worker-1", host="app-1", pid=4242, queues=["default", "mail"], concurrency=8,
        running=1, started_at=T0, last_seen_at=dt.datetime(2100, 1, 1, tzinfo=dt.UTC),
    )  # fmt: skip
    assert dict(Job.objects.values_list("pk", "status")) == {
        1: "succeeded",
        2: "succeeded",
        3: "failed",
        4: "ready",
        5: "scheduled",
        6: "held",
    }


def test_status_shows_jobs_by_queue_and_status_and_the_workers(scene):
    code, out, _ = run("status")

    assert code == 0
    assert_golden("status.txt", out)


def test_status_json_has_the_counts_the_paused_queues_and_the_workers(scene):
    code, out, _ = run("status", "--json")

    data = json.loads(out)
    assert code == 0
    assert data["totals"] == {
        "blocked": 0, "scheduled": 1, "ready": 1, "held": 1, "waiting": 0, "running": 0,
        "succeeded": 2, "failed": 1, "cancelled": 0,
    }  # fmt: skip
    assert [q["name"] for q in data["queues"] if q["paused"]] == ["reports"]
    assert data["queues"][0]["counts"]["succeeded"] == 2
    assert [w["id"] for w in data["workers"]] == ["worker-1"]


def test_jobs_lists_the_newest_first(scene):
    assert_golden("jobs.txt", run("jobs")[1])


def test_jobs_filters_by_status_error_queue_and_task(scene):
    assert_golden("jobs_failed.txt", run("jobs", "--status", "failed", "--error", "BOOM")[1])
    assert [r["id"] for r in json.loads(run("jobs", "--queue", "mail", "--json")[1])] == [4]
    task = "testproject.testapp.tasks.add"
    assert [r["id"] for r in json.loads(run("jobs", "--task", task, "--json")[1])] == [6, 5, 2, 1]
    assert json.loads(run("jobs", "--older-than", "1d", "--json")[1]) != []
    assert json.loads(run("jobs", "--error", "no such text", "--json")[1]) == []


def test_jobs_says_when_the_limit_cut_the_list(scene):
    out = run("jobs", "--limit", "2")[1]

    assert out.splitlines()[-1] == "The newest 2 shown; --limit N shows more."


def test_show_gives_everything_about_a_job(scene):
    assert_golden("show_failed.txt", run("show", "3", "--tracebacks")[1])
    data = json.loads(run("show", "3", "--json")[1])
    assert data["status"] == "failed" and data["attempt"] == 3
    assert [e["message"] for e in data["errors"]] == [f"boom on attempt {n}" for n in (1, 2, 3)]
    assert "traceback" not in data["errors"][0]  # only with --tracebacks


def test_show_of_a_missing_job_exits_2(scene):
    assert run("show", "999") == (2, "", "there is no job 999")


def test_workers_lists_the_live_workers(scene):
    assert_golden("workers.txt", run("workers")[1])


def test_a_dry_run_changes_nothing(scene):
    code, out, _ = run("cancel", "4", "6", "1", "--dry-run")

    assert code == 0
    assert out.splitlines() == [
        "would cancel job 4 (ready)",
        "would cancel job 6 (held)",
        "job 1 is succeeded; cancel would not change it",
    ]
    assert Job.objects.get(pk=4).status == "ready"


def test_cancel_by_filter_cancels_and_a_second_run_has_nothing_to_change(scene):
    code, out, err = run("cancel", "--queue", "mail")

    assert (code, out) == (0, "1 waiting job(s) cancelled, 0 running job(s) asked to stop\n")
    assert err == ""  # the progress bar is drawn on a terminal only
    assert Job.objects.get(pk=4).status == "cancelled"
    assert run("cancel", "--queue", "mail") == (1, "", "cancel: nothing to change")


def test_redrive_json_dry_run_then_redrive(scene):
    code, out, _ = run("redrive", "--status", "failed", "--dry-run", "--json")

    assert code == 0
    assert json.loads(out) == {
        "action": "redrive", "dry_run": True, "matched": 1, "changed": 0,
        "messages": ["would redrive 1 job(s)"], "missing": [], "ids": [3],
    }  # fmt: skip
    assert run("redrive", "--all", "--attempts", "2", "--yes")[0] == 0
    fields = ("status", "max_attempts", "attempts_charged", "redriven_attempts")
    assert Job.objects.filter(pk=3).values_list(*fields).get() == ("ready", 2, 0, 3)


def test_retry_hold_and_release_by_id(scene):
    assert run("retry", "5") == (0, "job 5 is due now\n", "")
    nothing = (1, "job 1 is succeeded; nothing to retry\n", "retry: nothing to change")
    assert run("retry", "1") == nothing
    assert run("release", "6") == (0, "job 6 released (ready)\n", "")
    assert run("hold", "6")[0] == 0
    assert Job.objects.get(pk=6).status == "held"


def test_an_unknown_job_id_exits_2_after_the_others_are_done(scene):
    code, out, err = run("hold", "4", "999")

    assert (code, err) == (2, "hold: not found: 999")
    assert out.splitlines() == ["there is no job 999", "job 4 held"]
    assert Job.objects.get(pk=4).status == "held"


def test_a_job_action_needs_ids_filters_or_all(scene):
    code, _, err = run("cancel")

    assert code == 2 and "name the jobs" in err
    assert run("cancel", "4", "--queue", "mail")[0] == 2


def test_pause_and_resume_queues(scene):
    assert run("pause", "mail", "--dry-run") == (0, "would pause queue mail\n", "")
    assert run("pause", "mail") == (0, "queue mail paused\n", "")
    assert Queue.objects.get(pk="mail").paused
    assert run("resume", "reports", "mail")[1] == "queue reports resumed\nqueue mail resumed\n"
    assert run("resume", "mail") == (1, "queue mail is not paused\n", "resume: nothing to change")
    code, _, err = run("pause", "nope")
    assert code == 2 and "is not one of WORKQUEUE['QUEUES']" in err


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_a_dry_run_on_an_unknown_queue_fails_as_the_real_run_does(scene, verb):
    real = run(verb, "nope")

    assert run(verb, "nope", "--dry-run") == real
    assert real[0] == 2 and "is not one of WORKQUEUE['QUEUES']" in real[2]


def test_purge_deletes_what_its_dry_run_counts(scene):
    Job.objects.filter(finished_at__isnull=False).update(finished_at=T0 - dt.timedelta(days=60))

    code, out, _ = run("purge", "--dry-run", "--json")
    counted = json.loads(out)

    assert code == 0
    assert (counted["jobs"], counted["workflows"]) == (
        {"succeeded": 2, "failed": 1, "cancelled": 0},
        0,
    )
    assert run("purge", "--status", "failed", "--yes") == (
        0, "purge deleted 1 job(s) (0 succeeded, 1 failed, 0 cancelled) and 0 workflow(s)\n", "",
    )  # fmt: skip
    assert run("purge", "--yes")[0] == 0
    assert sorted(Job.objects.values_list("pk", flat=True)) == [4, 5, 6]
    assert run("purge", "--noinput")[0] == 1


class Terminal(io.StringIO):
    """stdin at a terminal, where the operator types ``answer``."""

    def isatty(self) -> bool:
        return True


CHANGES_OF_EVERYTHING = [
    ("cancel", "--all"), ("redrive", "--all"), ("hold", "--all"), ("retry", "--all"),
    ("release", "--all"), ("purge",), ("purge", "--status", "failed"),
]  # fmt: skip


def _everything_old() -> list[tuple[int, str]]:
    """Every finished job past retention (so that purge has something to delete); the rows."""
    Job.objects.filter(finished_at__isnull=False).update(finished_at=T0 - dt.timedelta(days=60))
    return list(Job.objects.order_by("pk").values_list("pk", "status"))


@pytest.mark.parametrize("args", CHANGES_OF_EVERYTHING)
def test_a_change_of_every_job_without_yes_and_without_a_terminal_is_refused(
    scene, monkeypatch, args
):
    before = _everything_old()
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))  # a pipe: nobody to ask

    code, out, err = run(*args)

    assert (code, out) == (2, "")
    assert "--yes" in err and "--dry-run" in err and "not a terminal" in err
    assert list(Job.objects.order_by("pk").values_list("pk", "status")) == before


@pytest.mark.parametrize("args", CHANGES_OF_EVERYTHING)
def test_at_a_terminal_anything_but_yes_changes_nothing(scene, monkeypatch, args):
    before = _everything_old()
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))

    code, _, err = run(*args)

    assert (code, err.split(": ", 1)[1]) == (1, "not confirmed; nothing changed")
    assert list(Job.objects.order_by("pk").values_list("pk", "status")) == before


def test_at_a_terminal_typing_yes_goes_ahead(scene, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", Terminal("yes\n"))

    code, out, _ = run("cancel", "--all")

    assert (code, out) == (0, "3 waiting job(s) cancelled, 0 running job(s) asked to stop\n")
    assert "workqueue cancel --all will cancel 3 job(s)." in capsys.readouterr().out


def test_a_dry_run_or_a_change_by_id_or_filter_asks_nothing(scene, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))

    assert run("cancel", "--all", "--dry-run")[0] == 0
    assert run("purge", "--dry-run")[0] == 0
    assert run("hold", "4")[0] == 0
    assert run("cancel", "--queue", "mail")[0] == 0


def test_purge_older_than_replaces_the_retention_settings(scene):
    assert run("purge", "--older-than", "1d", "--dry-run")[1] == (
        "purge would delete 3 job(s) (2 succeeded, 1 failed, 0 cancelled) and 0 workflow(s)\n"
    )


def test_a_mutation_over_several_batches_reports_one_line():
    add.enqueue_many([((n, n), {}) for n in range(1_100)])

    assert run("cancel", "--all", "--yes") == (0, "cancel: 1100 of 1100 job(s) changed\n", "")
    assert not Job.objects.exclude(status="cancelled").exists()


def test_purge_by_ids_deletes_those_finished_jobs_only():
    done = Job.objects.create(task_name=add.name, status="succeeded", finished_at=T0)
    waiting = Job.objects.create(task_name=add.name)

    assert run("purge", str(done.pk), str(waiting.pk), "--dry-run")[:2] == (
        0, "purge would delete 1 of 2 job(s)\n",
    )  # fmt: skip
    assert Job.objects.count() == 2
    code, out, _ = run("purge", str(done.pk), str(waiting.pk))
    assert (code, out) == (0, "purge: 1 finished job(s) deleted\n")
    assert list(Job.objects.values_list("pk", flat=True)) == [waiting.pk]
    record = AuditRecord.objects.get()
    assert (record.action, record.target, record.changed, record.source) == (
        "purge", {"ids": [done.pk, waiting.pk]}, 1, "cli",
    )  # fmt: skip
    assert run("purge", str(waiting.pk))[0] == 1  # nothing it may delete
    assert run("purge", str(waiting.pk), "--status", "failed")[0] == 2

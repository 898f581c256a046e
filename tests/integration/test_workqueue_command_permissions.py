"""``manage.py workqueue --user NAME`` acts for a Django user: each subcommand needs the same
permission as in the admin and the API, ``show`` discloses what the user may see, and the audit
trail names the user and the OS user who ran the command. ``CLI_REQUIRE_USER`` makes
``--user`` mandatory."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from django_workqueue.models import AuditRecord, Job
from tests.support.commands import run_workqueue
from tests.support.factories import JobFactory
from tests.support.users import OPERATOR, VIEWER, user_with

pytestmark = pytest.mark.django_db


run = run_workqueue


SECRET_ERROR = {
    "attempt": 1, "at": "", "type": "builtins.ValueError", "message": "bad password=hunter2",
    "traceback": "Traceback (most recent call last):\nValueError: bad password=hunter2\n",
}  # fmt: skip


@pytest.mark.parametrize(
    ("subcommand", "codename"),
    [
        (["status"], "view_job"), (["jobs"], "view_job"), (["workers"], "view_job"),
        (["cancel", "--all", "--yes"], "cancel_job"), (["retry", "--all", "--yes"], "retry_job"),
        (["redrive", "--all", "--yes"], "retry_job"), (["hold", "--all", "--yes"], "hold_job"),
        (["release", "--all", "--yes"], "hold_job"), (["pause", "default"], "manage_queue"),
        (["resume", "default"], "manage_queue"), (["purge", "--yes"], "purge_job"),
    ],
)  # fmt: skip
def test_a_subcommand_is_refused_without_its_permission_and_changes_nothing(subcommand, codename):
    JobFactory(), JobFactory(failed=True)
    before = sorted(Job.objects.values_list("pk", "status"))
    others = {c for c in OPERATOR if c != codename}
    user_with(*others)

    code, _, message = run("--user", "ops", *subcommand)

    assert code == 2
    assert f"django_workqueue.{codename}" in message
    assert sorted(Job.objects.values_list("pk", "status")) == before
    assert not AuditRecord.objects.exists()


def test_an_allowed_change_is_audited_under_the_user_and_the_os_user_who_named_it(monkeypatch):
    JobFactory(failed=True)
    ops = user_with(*OPERATOR)
    monkeypatch.setattr("getpass.getuser", lambda: "night-shift")

    code, out, _ = run("--user", "ops", "redrive", "--all", "--yes")

    assert code == 0, out
    record = AuditRecord.objects.get()
    assert (record.actor, record.user_pk) == ("ops (cli:night-shift)", str(ops.pk))
    assert (record.action, record.changed) == ("redrive", 1)


def test_a_long_username_is_cut_so_that_the_os_user_stays_in_the_record(monkeypatch):
    JobFactory(failed=True)
    user_with(*OPERATOR, username="u" * 150)
    monkeypatch.setattr("getpass.getuser", lambda: "night-shift")

    code, out, _ = run("--user", "u" * 150, "redrive", "--all", "--yes")

    assert code == 0, out
    actor = AuditRecord.objects.get().actor
    assert len(actor) == 150 and actor.endswith("u (cli:night-shift)")


def test_show_hides_the_payload_and_tracebacks_a_viewer_may_not_see():
    job = JobFactory(kwargs={"token": "t-1"}, errors=[SECRET_ERROR], result={"n": 1})
    user_with(*VIEWER)

    code, out, _ = run("--user", "ops", "show", str(job.pk), "--json")

    shown = json.loads(out)
    assert code == 0
    assert (shown["args"], shown["kwargs"], shown["result"]) == (None, None, None)
    assert shown["payload_hidden"] is True
    assert "hunter2" not in json.dumps(shown)
    assert run("--user", "ops", "show", str(job.pk), "--tracebacks")[0] == 2


def test_show_with_every_permission_shows_what_the_shell_shows():
    job = JobFactory(kwargs={"token": "t-1"}, errors=[SECRET_ERROR])
    user_with(*OPERATOR)

    as_user = json.loads(run("--user", "ops", "show", str(job.pk), "--tracebacks", "--json")[1])
    as_shell = json.loads(run("show", str(job.pk), "--tracebacks", "--json")[1])

    assert as_user == as_shell
    assert as_user["errors"][0]["traceback"] == SECRET_ERROR["traceback"]


def test_an_unknown_or_inactive_user_is_refused_by_name():
    user_with(*OPERATOR, is_active=False)

    assert "there is no user 'nobody'" in run("--user", "nobody", "status")[2]
    assert "inactive" in run("--user", "ops", "status")[2]


def test_the_setting_makes_the_user_mandatory():
    with override_settings(WORKQUEUE={"CLI_REQUIRE_USER": True}):
        code, _, message = run("status")

    assert code == 2
    assert "--user NAME" in message

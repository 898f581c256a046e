"""The audit trail: ``audit.record()`` writes one row with the change (or rolls back with it),
every change ``manage.py workqueue`` makes is recorded with source "cli" and the OS user, and
the admin shows the trail read-only."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from django_workqueue import audit
from django_workqueue.models import AuditRecord, Job, Queue
from django_workqueue.states import Status
from tests.support.factories import JobFactory

pytestmark = pytest.mark.django_db


def run(*args: str) -> int:
    """The command's exit status."""
    try:
        call_command("workqueue", *args, stdout=io.StringIO(), stderr=io.StringIO())
    except CommandError as exc:
        return exc.returncode
    return 0


def trail() -> list[tuple[str, str, object, int, str]]:
    rows = AuditRecord.objects.order_by("id")
    return [(r.actor, r.action, r.target, r.changed, r.source) for r in rows]


@pytest.fixture
def os_user(monkeypatch):
    monkeypatch.setattr("django_workqueue.audit.getpass.getuser", lambda: "alice")


def test_a_record_keeps_a_snapshot_of_the_user_and_the_databases_time():
    ada = User.objects.create_user(username="ada")

    row = audit.record(ada, "cancel", {"ids": [1, 2]}, 2, "admin")
    row.refresh_from_db()

    assert (row.user_pk, row.actor, row.action, row.target, row.changed, row.source) == (
        str(ada.pk), "ada", "cancel", {"ids": [1, 2]}, 2, "admin",
    )  # fmt: skip
    assert row.created_at is not None
    ada.delete()
    assert AuditRecord.objects.get(pk=row.pk).actor == "ada"  # the trail outlives the user


@pytest.mark.parametrize(
    ("actor", "name"), [(None, "system"), ("cli:bob", "cli:bob"), (AnonymousUser(), "anonymous")]
)
def test_an_actor_without_an_account_is_named(actor, name):
    row = audit.record(actor, "pause", {"queues": ["mail"]}, 1, "code")

    assert (row.user_pk, row.actor) == ("", name)


def test_a_record_rolls_back_with_the_change_it_belongs_to():
    job = JobFactory()

    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(status=Status.HELD)
        audit.record(None, "hold", {"ids": [job.pk]}, 1, "code")
        raise RuntimeError("the change failed")

    assert not AuditRecord.objects.exists()
    assert Job.objects.get(pk=job.pk).status == Status.READY


def test_a_long_id_list_keeps_its_first_ids_and_their_number():
    row = audit.record(None, "cancel", {"ids": list(range(1000))}, 1000, "code")

    assert row.target == {"ids": list(range(audit.MAX_IDS)), "ids_total": 1000}


def test_a_target_too_large_to_store_is_kept_cut():
    row = audit.record(None, "cancel", {"filter": {"error": "x" * 10_000}}, 0, "code")

    assert list(row.target) == ["truncated"]
    assert len(row.target["truncated"]) == audit.MAX_TARGET_CHARS


def test_an_unknown_source_is_refused():
    with pytest.raises(ValueError, match="unknown audit source 'email'"):
        audit.record(None, "cancel", {}, 0, "email")


def test_the_cli_actor_is_the_os_user(os_user):
    assert audit.cli_actor() == "cli:alice"


def test_each_cli_change_by_id_is_recorded_with_the_os_user(os_user):
    waiting, held = JobFactory(), JobFactory(status=Status.HELD)
    failed = JobFactory(failed=True)

    assert run("cancel", str(waiting.pk)) == 0
    assert run("release", str(held.pk)) == 0
    assert run("hold", str(held.pk), "--json") == 0
    assert run("retry", str(failed.pk)) == 0

    assert trail() == [
        ("cli:alice", "cancel", {"ids": [waiting.pk]}, 1, "cli"),
        ("cli:alice", "release", {"ids": [held.pk]}, 1, "cli"),
        ("cli:alice", "hold", {"ids": [held.pk]}, 1, "cli"),
        ("cli:alice", "retry", {"ids": [failed.pk]}, 1, "cli"),
    ]


def test_a_cli_change_by_filter_records_the_filter_and_the_total(os_user):
    JobFactory.create_batch(3, failed=True, queue="mail")
    JobFactory(failed=True)

    assert run("redrive", "--queue", "mail", "--status", "failed", "--older-than", "1h") == 1
    assert run("redrive", "--queue", "mail", "--status", "failed") == 0
    assert run("cancel", "--all", "--yes") == 0

    assert trail() == [
        ("cli:alice", "redrive",
         {"filter": {"queue": ["mail"], "status": ["failed"], "older_than_seconds": 3600.0}},
         0, "cli"),
        ("cli:alice", "redrive", {"filter": {"queue": ["mail"], "status": ["failed"]}}, 3, "cli"),
        ("cli:alice", "cancel", {"filter": {}, "all": True}, 3, "cli"),
    ]  # fmt: skip


def test_queue_changes_and_purges_are_recorded(os_user):
    JobFactory(status=Status.SUCCEEDED, finished_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))

    assert run("pause", "mail", "reports") == 0
    assert run("resume", "mail") == 0
    assert run("purge", "--older-than", "7d", "--status", "succeeded", "--yes") == 0

    assert Queue.objects.get(pk="reports").paused
    days = {"succeeded": 7.0, "failed": None, "cancelled": None}
    assert trail() == [
        ("cli:alice", "pause", {"queues": ["mail", "reports"]}, 2, "cli"),
        ("cli:alice", "resume", {"queues": ["mail"]}, 1, "cli"),
        ("cli:alice", "purge", {"retention_days": days}, 1, "cli"),
    ]


def test_a_change_that_failed_on_an_unknown_id_still_records_what_it_did(os_user):
    job = JobFactory()

    assert run("hold", str(job.pk), "999999") == 2

    assert trail() == [("cli:alice", "hold", {"ids": [job.pk, 999999]}, 1, "cli")]


@pytest.mark.parametrize(
    "args",
    [("cancel", "--all", "--dry-run"), ("pause", "mail", "--dry-run"), ("purge", "--dry-run"),
     ("status",), ("jobs",)],
)  # fmt: skip
def test_dry_runs_and_reads_record_nothing(args, os_user):
    JobFactory()

    run(*args)

    assert trail() == []


def test_the_admin_lists_the_trail_read_only(admin_client):
    row = audit.record("cli:alice", "redrive", {"ids": [7]}, 1, "cli")
    base = "/admin/django_workqueue/auditrecord/"

    listing = admin_client.get(base)
    page = admin_client.get(f"{base}{row.pk}/change/")

    assert listing.status_code == 200
    assert b"cli:alice" in listing.content and b"redrive" in listing.content
    assert page.status_code == 200  # shown, not editable
    assert b'name="_save"' not in page.content
    assert admin_client.get(f"{base}add/").status_code == 403
    assert admin_client.post(f"{base}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.post(f"{base}{row.pk}/change/", {"action": "x"}).status_code == 403
    assert AuditRecord.objects.get(pk=row.pk).action == "redrive"

"""Idempotency claims (``context.claim``): True once per key across jobs and attempts, kept
for a configurable time, taken over once expired, and rolled back with an ``atomic=True``
task's failed attempt. The race between processes is in tests/acceptance/test_claim_race.py.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import checks

from django_workqueue.context import JobContext
from django_workqueue.db import driver_for
from django_workqueue.exceptions import InvalidOption
from django_workqueue.maintenance import reaper
from django_workqueue.models import IdempotencyClaim, Job
from testproject.testapp.models import Effect
from tests.support import flow_tasks
from tests.support.database import db_now, fresh
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings

pytestmark = pytest.mark.django_db(transaction=True)


def context_of(job: Job, owner: str = "worker-a") -> JobContext:
    """A context of ``job``'s next attempt, claimed as a worker would."""
    driver = driver_for("default")
    claimed = driver.claim_job(job.pk, owner)
    assert claimed is not None
    return JobContext(claimed, owner=owner, driver=driver)


def expire(key: str) -> None:
    IdempotencyClaim.objects.filter(key=key).update(expires_at=db_now() - dt.timedelta(seconds=1))


def test_a_key_is_claimed_once_then_refused():
    context = context_of(JobFactory())

    assert context.claim("charge:invoice-42") is True
    assert context.claim("charge:invoice-42") is False
    assert context.claim("charge:invoice-43") is True

    claim = IdempotencyClaim.objects.get(key="charge:invoice-42")
    assert claim.job_id == context.job_id


def test_another_job_sees_the_key_taken():
    first, second = context_of(JobFactory()), context_of(JobFactory())

    assert first.claim("mail:welcome:7") is True
    assert second.claim("mail:welcome:7") is False
    assert IdempotencyClaim.objects.get(key="mail:welcome:7").job_id == first.job_id


def test_a_retry_after_a_crash_skips_the_claimed_side_effect(drain):
    """Without atomic=True the claim commits at once: attempt 1 claims and crashes, attempt 2
    sees the key taken (at most once for the side effect)."""
    job = flow_tasks.claims_then_fails_once.enqueue("refund:9")

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == ("succeeded", 2, "skipped")
    assert flow_tasks.claimed[(job.pk, 1)] == [True]
    assert flow_tasks.claimed[(job.pk, 2)] == [False]
    assert IdempotencyClaim.objects.get(key="refund:9").job_id == job.pk


def test_an_atomic_tasks_failed_attempt_releases_its_claim(drain):
    """In an atomic=True task the claim joins the task's transaction: attempt 1's claim rolls
    back with its effect, attempt 2 claims again and its effect commits (exactly once)."""
    job = flow_tasks.atomic_claims_then_fails_once.enqueue("ship:order-5")

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == ("succeeded", 2, "did it")
    assert flow_tasks.claimed[(job.pk, 1)] == [True]
    assert flow_tasks.claimed[(job.pk, 2)] == [True]
    assert list(Effect.objects.filter(job_id=job.pk).values_list("attempt", flat=True)) == [2]
    assert IdempotencyClaim.objects.filter(key="ship:order-5").count() == 1


@pytest.mark.postgres_only
def test_a_claim_inside_the_bodys_own_transaction_commits_at_once_on_postgresql(drain):
    job = flow_tasks.claims_inside_own_transaction.enqueue("export:1")

    drain()

    job = fresh(job)
    assert (job.status, job.result) == ("succeeded", True)
    # The body's transaction rolled back; the claim had committed on a connection of its own.
    assert IdempotencyClaim.objects.get(key="export:1").job_id == job.pk


def test_a_claim_inside_the_bodys_own_transaction_is_refused_on_sqlite(drain, vendor):
    if vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL commits such a claim on a connection of its own")
    job = flow_tasks.claims_inside_own_transaction.enqueue("export:1")

    drain()

    job = fresh(job)
    assert job.status == "failed"
    assert job.errors[0]["type"] == "django_workqueue.exceptions.InvalidOption"
    assert "make the task atomic=True" in job.errors[0]["message"]
    assert not IdempotencyClaim.objects.filter(key="export:1").exists()


def test_an_expired_claim_is_taken_over_by_the_next_claimer():
    first, second = context_of(JobFactory()), context_of(JobFactory())
    assert first.claim("sync:3", ttl=60) is True
    assert second.claim("sync:3", ttl=60) is False

    expire("sync:3")

    assert second.claim("sync:3", ttl=120) is True
    assert first.claim("sync:3") is False
    claim = IdempotencyClaim.objects.get(key="sync:3")
    assert claim.job_id == second.job_id
    assert 110 < (claim.expires_at - db_now()).total_seconds() <= 120


@workqueue_settings(CLAIM_TTL=3600)
def test_a_claim_is_kept_for_claim_ttl_unless_the_call_gives_its_own():
    context = context_of(JobFactory())

    context.claim("default-ttl")
    context.claim("own-ttl", ttl=dt.timedelta(minutes=5))

    kept = {c.key: (c.expires_at - c.claimed_at).total_seconds()
            for c in IdempotencyClaim.objects.all()}  # fmt: skip
    assert kept == {"default-ttl": pytest.approx(3600, abs=1), "own-ttl": pytest.approx(300, abs=1)}


@pytest.mark.parametrize(
    "key", ["", "x" * 256, 42, None, "nul\x00byte"], ids=["empty", "long", "int", "none", "nul"]
)
def test_a_bad_key_is_refused_with_what_a_key_must_be(key):
    context = context_of(JobFactory())

    with pytest.raises(InvalidOption, match=r"context\.claim: key"):
        context.claim(key)

    assert not IdempotencyClaim.objects.exists()


@pytest.mark.parametrize("ttl", [0, -1, "1h", True, 10**12])
def test_a_bad_ttl_is_refused(ttl):
    context = context_of(JobFactory())

    with pytest.raises(InvalidOption, match="ttl must be a positive number of seconds"):
        context.claim("k", ttl=ttl)


@pytest.mark.parametrize("value", [0, -5, "week", None])
def test_a_bad_claim_ttl_setting_is_a_check_error(value):
    with workqueue_settings(CLAIM_TTL=value):
        errors = [e for e in checks.run_checks() if "CLAIM_TTL" in e.msg]
    assert [e.id for e in errors] == ["django_workqueue.E002"]


def test_the_reaper_deletes_expired_claims_and_keeps_live_ones():
    context = context_of(JobFactory())
    for key in ("old-1", "old-2", "live"):
        context.claim(key)
    expire("old-1")
    expire("old-2")

    reaper.run_once()

    assert list(IdempotencyClaim.objects.values_list("key", flat=True)) == ["live"]


def test_expired_claims_are_deleted_in_bounded_batches_oldest_first():
    context = context_of(JobFactory())
    now = db_now()
    for n in range(3):
        context.claim(f"old-{n}")
        IdempotencyClaim.objects.filter(key=f"old-{n}").update(
            expires_at=now - dt.timedelta(minutes=10 - n)
        )

    assert driver_for("default").delete_expired_claims(2) == 2

    assert list(IdempotencyClaim.objects.values_list("key", flat=True)) == ["old-2"]


def test_a_claim_taken_over_is_not_deleted_as_expired():
    context = context_of(JobFactory())
    context.claim("k", ttl=60)
    expire("k")
    assert context.claim("k", ttl=60) is True  # taken over: live again

    assert driver_for("default").delete_expired_claims(10) == 0
    assert IdempotencyClaim.objects.filter(key="k").exists()

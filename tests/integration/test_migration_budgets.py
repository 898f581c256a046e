"""Migration 0012 splits the claim counter from the budgets: each row written before it keeps
what it had left (every claim so far counted as charged; a running job's claim is charged at its
ending), and the migration goes back the same way, on both databases."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from django_workqueue.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

APP = "django_workqueue"
BEFORE, AFTER = "0012_durable_waits", "0013_attempt_budgets"


def test_0012_keeps_each_rows_remaining_budget_and_goes_back() -> None:
    try:
        call_command("migrate", APP, BEFORE, verbosity=0)
        state = MigrationExecutor(connection).loader.project_state((APP, BEFORE))
        old = state.apps.get_model(APP, "Job")
        # A release raised max_attempts to 4 after the first of two claims; a running third
        # claim of three; a job never claimed.
        released = old.objects.create(task_name="t", status="ready", attempt=2, max_attempts=4)
        running = old.objects.create(
            task_name="t", status="running", attempt=3, max_attempts=3, lease_owner="w"
        )
        fresh = old.objects.create(task_name="t", status="ready", attempt=0, max_attempts=3)

        call_command("migrate", APP, AFTER, verbosity=0)

        rows = {
            pk: (attempt, budget, charged)
            for pk, attempt, budget, charged in Job.objects.values_list(
                "pk", "attempt", "max_attempts", "attempts_charged"
            )
        }
        assert rows == {
            released.pk: (2, 4, 2),  # two left, as max_attempts - attempt said
            running.pk: (3, 3, 2),  # its ending spends the third: failed if it fails, as before
            fresh.pk: (0, 3, 0),
        }
        Job.objects.filter(pk=released.pk).update(attempts_charged=3)  # one more failure

        call_command("migrate", APP, BEFORE, verbosity=0)

        back = dict(old.objects.values_list("pk", "max_attempts"))
        # One left after three claims: 4 - 3 charged = 1 = max_attempts - attempt back then.
        assert back == {released.pk: 3, running.pk: 3, fresh.pk: 3}
    finally:
        call_command("migrate", verbosity=0)

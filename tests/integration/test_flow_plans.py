"""On PostgreSQL, the statements that read ready jobs in the order of ``wq_job_flow`` (the flow
claim's walk over keys, its claim, the batch backlog and batch claim) read that index in order
whatever the table's statistics say, and leave the session's planner settings as they were.

Statistics gathered while the jobs table was empty (or held finished jobs only) promise about
one ready row; until autovacuum analyzes the table again, a burst of jobs would be read through
an index on ``status`` and sorted, every step of the walk reading all the queue's ready rows.
PostgreSQL only by design: these are the planner's choices (SQLite's statements name their
index, see ``test_batch_tasks`` and ``test_flow_limits``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from django_workqueue.db import driver_for
from django_workqueue.flow.batches import claim_batches
from django_workqueue.flow.claim import FlowClaimer
from django_workqueue.models import Job
from testproject.testapp import flow_tasks as tasks
from testproject.testapp.tasks import batch_echo
from tests.support.flow import flow_tasks
from tests.support.plans import PREFIX, captured_statements, explain

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

TABLE = Job._meta.db_table
# Indexes the planner could read ready rows through, then sort them.
UNORDERED = ("wq_job_active", "wq_job_status_finished", f"Seq Scan on {TABLE}")


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    with flow_tasks():
        yield


def analyze_while_empty() -> None:
    assert not Job.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {TABLE}")


def planner_settings() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('enable_sort'), current_setting('jit')")
        return cursor.fetchone()


def assert_ordered_reads(statements) -> None:
    pinned = [(sql, params) for sql, params in statements if sql.startswith(PREFIX)]
    assert pinned, [sql[:80] for sql, _ in statements]
    for sql, params in pinned:
        plan = explain(sql, params)
        assert "wq_job_flow" in plan, plan
        assert not [name for name in UNORDERED if name in plan], plan


@pytest.mark.parametrize("kind", ["fair", "limited"])
def test_a_flow_claim_walks_the_flow_index_with_statistics_of_an_empty_table(kind):
    analyze_while_empty()
    if kind == "fair":
        tasks.tenant_work.enqueue_many([((f"t{n % 400}",), {}) for n in range(4000)])
    else:
        tasks.one_per_customer.enqueue_many([((n % 400,), {}) for n in range(4000)])
    flow = FlowClaimer(driver_for("default"), "planner")

    with captured_statements() as statements:
        claimed = flow.claim(["default"], 8)

    assert len(claimed) == 8
    assert len({job.id for job in claimed}) == 8
    # Two statements read in the flow index's order: the walk over keys and the claim.
    assert sum(sql.startswith(PREFIX) for sql, _ in statements) == 2
    assert_ordered_reads(statements)


def test_a_batch_claim_walks_the_flow_index_with_statistics_of_an_empty_table():
    analyze_while_empty()
    batch_echo.enqueue_many([((n,), {}) for n in range(3000)])

    with captured_statements() as statements:
        found = claim_batches(driver_for("default"), ["default"], 1, "planner")

    assert len(found.batches) == 1
    assert sum(sql.startswith(PREFIX) for sql, _ in statements) == 2
    assert_ordered_reads(statements)


def test_the_settings_last_for_the_statement_only():
    before = planner_settings()
    assert before == ("on", "on") or before[0] == "on", before
    tasks.tenant_work.enqueue_many([((f"t{n % 3}",), {}) for n in range(9)])
    batch_echo.enqueue_many([((n,), {}) for n in range(3)])

    assert len(FlowClaimer(driver_for("default"), "planner").claim(["default"], 4)) == 4
    claim_batches(driver_for("default"), ["default"], 1, "planner")

    assert planner_settings() == before


def test_with_server_side_binding_the_settings_go_first_in_a_transaction_of_their_own():
    """A connection that binds on the server (``OPTIONS={"server_side_binding": True}``) runs
    one statement per call: the settings are sent first, in a transaction that holds them for
    the statement and ends with it."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    connection.ensure_connection()
    before = planner_settings()
    factory = connection.connection.cursor_factory
    connection.connection.cursor_factory = ServerBindingCursor
    try:
        analyze_while_empty()
        tasks.tenant_work.enqueue_many([((f"t{n % 50}",), {}) for n in range(500)])
        with captured_statements() as statements:
            claimed = FlowClaimer(driver_for("default"), "planner").claim(["default"], 8)
        after = planner_settings()
    finally:
        connection.connection.cursor_factory = factory

    assert len(claimed) == 8
    assert not [sql for sql, _ in statements if sql.startswith(PREFIX)]
    settings = [n for n, (sql, _) in enumerate(statements) if sql == PREFIX[:-2]]
    assert len(settings) == 2, [sql[:80] for sql, _ in statements]
    for n in settings:  # each right before the statement it is for
        plan = explain(PREFIX + statements[n + 1][0], statements[n + 1][1])
        assert "wq_job_flow" in plan and "wq_job_active" not in plan, plan
    assert after == before

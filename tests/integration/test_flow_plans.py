"""On PostgreSQL, the statements that read ready jobs in the order of ``wq_job_flow`` (the flow
claim's walk over keys, its claim, the batch backlog and batch claim) read that index in order
whatever the table's statistics say, and leave the planner's settings as they were, on the
session and in a caller's transaction.

Statistics gathered while the jobs table was empty (or held finished jobs only) promise about
one ready row; until autovacuum analyzes the table again, a burst of jobs would be read through
an index on ``status`` and sorted, every step of the walk reading all the queue's ready rows.
PostgreSQL only by design: these are the planner's choices (SQLite's statements name their
index, see ``test_batch_tasks`` and ``test_flow_limits``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection, transaction

from django_workqueue.db import driver_for
from django_workqueue.flow.batches import claim_batches
from django_workqueue.flow.claim import FlowClaimer
from django_workqueue.models import Job
from testproject.testapp import flow_tasks as tasks
from testproject.testapp.tasks import batch_echo
from tests.support.flow import flow_tasks
from tests.support.plans import captured_statements, explain, in_index_order, reads

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

TABLE = Job._meta.db_table
# What the planner could read ready rows through, and then sort them.
UNORDERED = ("wq_job_active", "wq_job_status_finished", f"Seq Scan on {TABLE}")


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    with flow_tasks():
        yield


@pytest.fixture
def stale_statistics() -> Iterator[None]:
    """The state of a table that churns: 20,000 flow-controlled jobs came and went (their
    index entries dead, not yet vacuumed), and the table was analyzed while empty; autovacuum
    is kept from analyzing it again while the test fills it (it would after 50 rows, a race
    with the test's EXPLAIN)."""
    assert not Job.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TABLE} SET (autovacuum_enabled = false)")
    try:
        tasks.tenant_work.enqueue_many([((f"t{n % 2000}",), {}) for n in range(20_000)])
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE}")
            cursor.execute(f"ANALYZE {TABLE}")
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {TABLE} RESET (autovacuum_enabled)")


def planner_settings() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('enable_sort'), current_setting('jit')")
        return cursor.fetchone()


def ordered(statements) -> list[tuple[str, object]]:
    """The captured statements sent in the planner settings of ``_fetch_in_index_order``."""
    return [(sql, params) for sql, params in statements if in_index_order(sql) is not None]


def assert_ordered_reads(statements) -> None:
    for sql, params in ordered(statements):
        plan = explain(sql, params)
        assert reads(plan, "wq_job_flow"), plan
        assert not [name for name in UNORDERED if name in plan], plan


@pytest.mark.parametrize("kind", ["fair", "limited"])
def test_a_flow_claim_walks_the_flow_index_with_statistics_of_an_empty_table(
    kind, stale_statistics
):
    if kind == "fair":
        tasks.tenant_work.enqueue_many([((f"t{n % 2000}",), {}) for n in range(20_000)])
    else:
        tasks.one_per_customer.enqueue_many([((n % 2000,), {}) for n in range(20_000)])
    flow = FlowClaimer(driver_for("default"), "planner")

    with captured_statements() as statements:
        claimed = flow.claim(["default"], 8)

    assert len(claimed) == 8
    assert len({job.id for job in claimed}) == 8
    # Two statements read in the flow index's order: the walk over keys and the claim.
    walk, claim = ordered(statements)
    assert "WITH RECURSIVE" in walk[0] and "UPDATE" in claim[0]
    assert_ordered_reads(statements)
    # The hazard is real on this server: planned without the settings, the walk reads the
    # queue's ready rows through another index and sorts them.
    unpinned = explain(*walk, pinned=False)
    assert [name for name in UNORDERED if name in unpinned], unpinned


def test_a_batch_claim_walks_the_flow_index_with_statistics_of_an_empty_table(stale_statistics):
    batch_echo.enqueue_many([((n,), {}) for n in range(3000)])

    with captured_statements() as statements:
        found = claim_batches(driver_for("default"), ["default"], 1, "planner")

    assert len(found.batches) == 1
    assert len(ordered(statements)) == 2  # the backlog, then the claim of the due group
    assert_ordered_reads(statements)


def test_the_settings_end_with_the_statement():
    before = planner_settings()
    assert before[0] == "on", before
    tasks.tenant_work.enqueue_many([((f"t{n % 3}",), {}) for n in range(9)])
    batch_echo.enqueue_many([((n,), {}) for n in range(3)])

    assert len(FlowClaimer(driver_for("default"), "planner").claim(["default"], 4)) == 4
    assert len(claim_batches(driver_for("default"), ["default"], 1, "planner").batches) == 1

    assert planner_settings() == before


@pytest.mark.parametrize("jit", ["on", "off"])
def test_in_a_callers_transaction_the_settings_are_put_back(jit):
    """A flow claim inside an open transaction (``testing.drain`` in a test's) leaves the
    transaction's settings as it found them, a value the caller set itself included."""
    tasks.tenant_work.enqueue_many([((f"t{n % 3}",), {}) for n in range(9)])
    tasks.one_per_customer.enqueue_many([((n % 3,), {}) for n in range(9)])

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL jit = {jit}")
        flow = FlowClaimer(driver_for("default"), "planner")
        assert len(flow.claim(["default"], 6)) == 6
        inside = planner_settings()

    assert inside == ("on", jit)


def test_with_server_side_binding_the_statements_go_one_by_one_in_a_transaction():
    """A connection that binds on the server (``OPTIONS={"server_side_binding": True}``) runs
    one statement per call: the four go one by one, in a transaction that ends with them."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    from tests.support.plans import PREFIX

    connection.ensure_connection()
    before = planner_settings()
    factory = connection.connection.cursor_factory
    connection.connection.cursor_factory = ServerBindingCursor
    try:
        tasks.tenant_work.enqueue_many([((f"t{n % 50}",), {}) for n in range(500)])
        with captured_statements() as statements:
            claimed = FlowClaimer(driver_for("default"), "planner").claim(["default"], 8)
        after = planner_settings()
    finally:
        connection.connection.cursor_factory = factory

    assert len(claimed) == 8
    assert not ordered(statements)
    saves = [n for n, (sql, _) in enumerate(statements) if sql == PREFIX.split("; ")[0]]
    assert len(saves) == 2, [sql[:80] for sql, _ in statements]
    for n in saves:  # save, turn off, the statement, put back
        sql, params = statements[n + 2]
        assert statements[n + 1][0] == PREFIX.split("; ")[1]
        assert statements[n + 3][0].startswith("SELECT set_config('enable_sort', current_")
        plan = explain(f"{PREFIX}{sql}; {statements[n + 3][0]}", params)
        assert reads(plan, "wq_job_flow") and "wq_job_active" not in plan, plan
    assert after == before

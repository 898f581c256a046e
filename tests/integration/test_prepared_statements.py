"""Server-side prepared statements for enqueue and the plain claim
(``WORKQUEUE["PREPARED_STATEMENTS"]``).

PostgreSQL only by design: SQLite has no server to prepare on (its driver's statements are
cached by the sqlite3 module), and the setting is ignored there."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import DataError, connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_workqueue.db import driver_for
from django_workqueue.models import Job
from testproject.testapp.tasks import add

# The statements live on a server session: these tests read it (pg_prepared_statements), so
# they need the test's connection straight to PostgreSQL; through a pooler without
# prepared-statement support they are lost between transactions (test_pgbouncer.py).
pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.postgres_direct,
    pytest.mark.django_db(transaction=True),
]


def prepared(pattern: str) -> list[tuple[int, int]]:
    """(generic plans, custom plans) of each statement like ``pattern`` prepared in this
    session."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement ILIKE %s",
            [pattern],
        )
        return cursor.fetchall()


def prepared_inserts() -> list[tuple[int, int]]:
    """Of each insert into the jobs table prepared in this session (see ``prepared``)."""
    return prepared("%INSERT INTO%django_workqueue_job%")


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture(autouse=True)
def fresh_session():
    connection.ensure_connection()
    with connection.cursor() as cursor:  # psycopg sees it and forgets what it had prepared
        cursor.execute("DEALLOCATE ALL")
    yield


def test_enqueue_prepares_its_insert_once_and_reuses_it():
    for n in range(4):
        add.enqueue(n, 1)
    [(generic, custom)] = prepared_inserts()
    assert generic + custom == 4


def test_enqueue_many_prepares_its_insert_once_and_reuses_it():
    for n in range(3):
        add.enqueue_many([((n, 1), {}), ((n, 2), {})])
    [(generic, custom)] = prepared_inserts()
    assert generic + custom == 3
    assert Job.objects.count() == 6


def test_values_of_any_size_share_one_prepared_statement():
    add.using(priority=0, lease_seconds=60).enqueue(1, 2**40)
    add.using(priority=100, lease_seconds=10**6).enqueue(1, 2)
    assert len(prepared_inserts()) == 1


def test_a_prepared_enqueue_joins_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        add.enqueue(1, 2)
        assert prepared_inserts()
        raise RuntimeError("roll back")
    assert Job.objects.count() == 0


def test_other_statements_of_the_connection_are_not_prepared():
    add.enqueue(1, 2)
    for _ in range(10):
        Job.objects.filter(task_name="x").count()
    others = [s for s in prepared_statements() if "INSERT" not in s]
    assert others == []


@override_settings(WORKQUEUE={**settings.WORKQUEUE, "PREPARED_STATEMENTS": False})
def test_with_prepared_statements_off_nothing_is_prepared():
    add.enqueue(1, 2)
    add.enqueue_many([((1, 2), {}), ((3, 4), {})])
    assert Job.objects.count() == 3
    assert prepared_statements() == []


def test_a_prepared_insert_is_logged_with_its_values():
    with CaptureQueriesContext(connection) as queries:
        add.enqueue(1, 2)
    [insert] = [q["sql"] for q in queries.captured_queries if "INSERT INTO" in q["sql"]]
    assert "'testproject.testapp.tasks.add'" in insert
    assert "$1" not in insert


def test_enqueue_prepares_again_on_a_new_connection():
    add.enqueue(1, 2)
    connection.close()
    add.enqueue(3, 4)
    [(generic, custom)] = prepared_inserts()
    assert generic + custom == 1
    assert Job.objects.count() == 2


def test_enqueue_prepares_again_after_a_rollback_forgot_the_statements():
    add.enqueue(1, 2)
    with pytest.raises(RuntimeError), transaction.atomic():
        add.enqueue(3, 4)
        raise RuntimeError("roll back")  # psycopg deallocates what it prepared
    add.enqueue(5, 6)
    assert sorted(job.args for job in Job.objects.all()) == [[1, 2], [5, 6]]
    assert len(prepared_inserts()) == 1


# The plain claim: a worker woken by a NOTIFY waits on it before its job starts (issue 32's
# pickup target); planned on every call it cost several times its run.


def prepared_claims() -> list[tuple[int, int]]:
    """Of each plain claim prepared in this session (see ``prepared``)."""
    return prepared("%WITH picked AS MATERIALIZED%unnest%UPDATE%django_workqueue_job%")


def test_the_claim_prepares_its_statement_once_and_reuses_it():
    driver = driver_for("default")
    add.enqueue_many([((n, 1), {}) for n in range(3)])
    claimed = [driver.claim(["default", "mail"], 1, "w") for _ in range(3)]
    driver.claim(["default"], 5, "w")  # other queues, another limit: the same statement
    assert [len(jobs) for jobs in claimed] == [1, 1, 1]
    [(generic, custom)] = prepared_claims()
    assert generic + custom == 4
    assert Job.objects.filter(status="running", lease_owner="w").count() == 3


def test_a_prepared_claim_joins_the_callers_transaction():
    add.enqueue(1, 2)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert len(driver_for("default").claim(["default"], 1, "w")) == 1
        raise RuntimeError("roll back")
    assert Job.objects.get().status == "ready"


def test_the_claim_is_planned_once_after_its_first_five_calls():
    """PostgreSQL plans a prepared statement's first five calls with their values, then keeps
    its generic plan if that is estimated no dearer. The claim's queues and limit are unknown
    to every plan (docs/explanation/performance.md), so from the sixth call on it is not
    planned again, whatever the limit, even where the generic plan guesses the limit at a
    hundred jobs (a tenth of the backlog the table's statistics show)."""
    driver = driver_for("default")
    add.enqueue_many([((n, 1), {}) for n in range(1000)])
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")
    claimed = [driver.claim(["default"], limit, "w") for limit in (1, 2, 3, 1, 2, 3, 1, 2, 3)]
    assert [len(jobs) for jobs in claimed] == [1, 2, 3, 1, 2, 3, 1, 2, 3]
    [(generic, custom)] = prepared_claims()
    assert (generic, custom) == (4, 5)


@override_settings(WORKQUEUE={**settings.WORKQUEUE, "PREPARED_STATEMENTS": False})
def test_with_prepared_statements_off_the_claim_is_not_prepared():
    add.enqueue(1, 2)
    assert len(driver_for("default").claim(["default"], 1, "w")) == 1
    assert prepared_statements() == []


# The flow claim: its walk over keys (alone, or with the lock of its limit keys' rows) and its
# claim in rounds were planned on every call, which cost as much as running them.


def prepared_flow_statements() -> dict[str, tuple[int, int]]:
    """(generic plans, custom plans) of the flow claim's statements prepared in this session:
    the walk alone, the walk with the limits' lock, the claim in rounds."""
    walks = prepared("WITH RECURSIVE served AS%")
    with_lock = prepared("WITH RECURSIVE served AS%INSERT INTO%flowlimit%")
    return {
        "walk": next((row for row in walks if row not in with_lock), (0, 0)),
        "walk_and_lock": with_lock[0] if with_lock else (0, 0),
        "claim": (prepared("WITH want AS%jsonb_to_recordset%UPDATE%") or [(0, 0)])[0],
    }


@pytest.fixture
def flow_registered():
    from tests.support.flow import flow_tasks

    with flow_tasks():
        yield


def test_the_flow_claims_statements_are_planned_once_after_their_first_five_calls(
    flow_registered,
):
    """The walk (alone, and with the lock of the limit keys' rows) and the claim in rounds
    are prepared, and from their sixth call on run on their generic plan, whatever the claim's
    size: their queues and limits are unknown to every plan, so both kinds are estimated
    alike."""
    from django_workqueue.flow.claim import FlowClaimer
    from testproject.testapp import flow_tasks as tasks

    sizes = (1, 2, 3, 4, 2, 3, 1, 4, 2, 3)
    # Limit keys only: every walk locks their rows. Then tenants' keys only: walks alone.
    for enqueue in (tasks.one_per_customer, tasks.tenant_work):
        Job.objects.all().delete()
        enqueue.enqueue_many([((n % 50,), {}) for n in range(500)])
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Job._meta.db_table}")
        flow = FlowClaimer(driver_for("default"), "w")
        for size in sizes:
            assert len(flow.claim(["default"], size)) == size

    statements = prepared_flow_statements()
    # The tenants' claimer walked and locked at first (it assumes the last walk met limits).
    assert statements["walk_and_lock"] == (len(sizes) + 1 - 5, 5), statements
    assert statements["walk"] == (len(sizes) - 1 - 5, 5), statements
    # Every claim claimed in rounds, once each (none came short).
    assert statements["claim"] == (2 * len(sizes) - 5, 5), statements


def test_a_prepared_flow_claim_joins_the_callers_transaction(flow_registered):
    from django_workqueue.flow.claim import FlowClaimer
    from testproject.testapp import flow_tasks as tasks

    tasks.tenant_work.enqueue_many([((f"t{n}",), {}) for n in range(3)])
    tasks.one_per_customer.enqueue_many([((n,), {}) for n in range(3)])
    with pytest.raises(RuntimeError), transaction.atomic():
        assert len(FlowClaimer(driver_for("default"), "w").claim(["default"], 6)) == 6
        raise RuntimeError("roll back")
    assert set(Job.objects.values_list("status", flat=True)) == {"ready"}


@override_settings(WORKQUEUE={**settings.WORKQUEUE, "PREPARED_STATEMENTS": False})
def test_with_prepared_statements_off_the_flow_claim_is_not_prepared(flow_registered):
    from django_workqueue.flow.claim import FlowClaimer
    from testproject.testapp import flow_tasks as tasks

    tasks.tenant_work.enqueue_many([((f"t{n}",), {}) for n in range(3)])
    tasks.one_per_customer.enqueue_many([((n,), {}) for n in range(3)])
    flow = FlowClaimer(driver_for("default"), "w")
    assert len(flow.claim(["default"], 3)) + len(flow.claim(["default"], 3)) == 6
    assert prepared_statements() == []


def test_a_rate_limited_claims_starts_are_written_by_a_prepared_statement(flow_registered):
    """The write of a rate's starts goes prepared, with the transaction's COMMIT, in one
    round trip."""
    from django_workqueue.flow.claim import FlowClaimer
    from testproject.testapp import flow_tasks as tasks

    tasks.twenty_a_second.enqueue_many([((n,), {}) for n in range(8)])
    flow = FlowClaimer(driver_for("default"), "w")
    with CaptureQueriesContext(connection) as claims:
        for _ in range(4):
            assert len(flow.claim(["default"], 2)) == 2

    [(generic, custom)] = prepared("UPDATE%flowlimit%jsonb_to_recordset%")
    assert generic + custom == 4
    writes = [q["sql"] for q in claims.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(writes) == 4 and all(sql.endswith("; COMMIT") for sql in writes)


def test_a_flow_walk_refused_before_it_is_sent_leaves_the_callers_settings_alone():
    # The walk goes in one pipeline after the planner settings it needs (sorts off): refused
    # by psycopg itself (a NUL byte in a queue's name), it must not leave them in the
    # caller's transaction, where every later statement would plan without sorting.
    def planner_settings() -> tuple[str, str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('enable_sort'), current_setting('jit')")
            return cursor.fetchone()

    before = planner_settings()
    with transaction.atomic():
        with pytest.raises(DataError):
            driver_for("default").flow_keys(["def\x00ault"], "", 5)
        assert planner_settings() == before

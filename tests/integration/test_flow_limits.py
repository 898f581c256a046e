"""Concurrency and rate limits, and fairness between keys, as the flow claim applies them
(``flow/claim.py``), on every vendor. The clock is injected with ``now=`` where a rate's period
must pass; real concurrent claimers are in ``test_flow_concurrency`` (PostgreSQL) and in the
acceptance tests."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from django.db import DatabaseError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_workqueue import registry
from django_workqueue.db import FlowPick, driver_for
from django_workqueue.flow.claim import FlowClaimer
from django_workqueue.models import FlowLimit, Job
from django_workqueue.worker.runner import Worker
from testproject.testapp import flow_tasks as tasks
from testproject.testapp import tasks as plain_tasks
from tests.support.database import expire_and_reap
from tests.support.flow import flow_tasks

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    with flow_tasks():
        yield


def claimer(owner: str = "owner-a") -> FlowClaimer:
    return FlowClaimer(driver_for("default"), owner)


def finish(*jobs) -> None:
    Job.objects.filter(pk__in=[job.id for job in jobs]).update(status="succeeded")


class TestConcurrency:
    def test_a_task_runs_at_most_its_concurrency_across_claims_and_claimers(self):
        tasks.two_at_a_time.enqueue_many([((), {})] * 6)

        first = claimer("a").claim(["default"], 10)
        second = claimer("b").claim(["default"], 10)

        assert len(first) == 2 and second == []
        assert Job.objects.filter(status="running").count() == 2

    def test_a_finished_job_frees_its_place_for_the_next(self):
        tasks.two_at_a_time.enqueue_many([((), {})] * 6)
        flow = claimer()
        running = flow.claim(["default"], 10)

        finish(running[0])

        assert len(flow.claim(["default"], 10)) == 1

    def test_a_crashed_workers_place_comes_back_with_its_lease(self):
        tasks.two_at_a_time.enqueue_many([((), {})] * 3)
        running = claimer("crashed").claim(["default"], 10)
        assert claimer("b").claim(["default"], 10) == []

        with expire_and_reap(Job.objects.get(pk=running[0].id)):
            pass

        assert len(claimer("b").claim(["default"], 10)) == 1

    def test_a_limit_key_limits_each_key_on_its_own(self):
        for customer in (1, 1, 1, 2, 2, 3):
            tasks.one_per_customer.enqueue(customer)

        claimed = claimer().claim(["default"], 10)

        assert sorted(job.kwargs.get("customer_id", job.args[0]) for job in claimed) == [1, 2, 3]
        # Where rows lock, each key's lock row is made; SQLite (no row locks) makes none.
        keys = {f"limit:{tasks.one_per_customer.name}:customer:{n}" for n in (1, 2, 3)}
        made = keys if driver_for("default").supports_row_locks else set()
        assert set(FlowLimit.objects.values_list("key", flat=True)) == made

    def test_jobs_held_back_by_a_limit_are_not_charged_and_do_not_block_other_tasks(self):
        held = tasks.two_at_a_time.enqueue_many([((), {})] * 4)
        plain = plain_tasks.add.enqueue(1, 2)
        worker = Worker(queues=["default"], concurrency=10)

        claimed = {job.id for job in worker._claim(["default"], 10)}

        assert plain.pk in claimed
        waiting = Job.objects.filter(pk__in=[job.pk for job in held], status="ready")
        assert waiting.count() == 2
        assert set(waiting.values_list("attempt", flat=True)) == {0}

    def test_only_a_worker_that_knows_flow_tasks_runs_the_flow_claim(self, monkeypatch):
        assert Worker(queues=["default"]).claimer.uses_flow
        for name, registered in list(registry._registry.items()):  # other modules' too
            spec = registered.spec
            if spec.concurrency is not None or spec.rate is not None or spec.fair_key is not None:
                monkeypatch.delitem(registry._registry, name)

        assert not Worker(queues=["default"]).claimer.uses_flow


class TestRate:
    def test_a_rate_allows_its_count_per_period_then_waits_for_the_period(self):
        region = tasks.three_a_second_per_region
        region.enqueue_many([(("eu",), {"n": n}) for n in range(10)])
        flow = claimer()
        start = driver_for("default").now()

        first = flow.claim(["default"], 10, now=start)
        within = flow.claim(["default"], 10, now=start + dt.timedelta(seconds=0.9))
        retry_at = flow.retry_at
        after = flow.claim(["default"], 10, now=start + dt.timedelta(seconds=1.01))

        assert (len(first), len(within), len(after)) == (3, 0, 3)
        assert retry_at is not None

    def test_each_limit_key_has_its_own_rate(self):
        region = tasks.three_a_second_per_region
        region.enqueue_many([((name,), {"n": n}) for name in ("eu", "us") for n in range(5)])

        claimed = claimer().claim(["default"], 20, now=driver_for("default").now())

        assert Counter(job.args[0] for job in claimed) == {"eu": 3, "us": 3}

    def test_old_starts_are_pruned_from_the_limit_row(self):
        tasks.twenty_a_second.enqueue_many([((n,), {}) for n in range(30)])
        flow = claimer()
        start = driver_for("default").now()
        flow.claim(["default"], 5, now=start)

        flow.claim(["default"], 5, now=start + dt.timedelta(seconds=5))

        (row,) = FlowLimit.objects.all()
        assert len(row.starts) == 1 and row.starts[0][1] == 5


class TestFairness:
    def test_a_small_tenant_is_not_starved_by_a_large_backlog_enqueued_first(self):
        concurrency = 10
        tasks.tenant_work.enqueue_many([(("a",), {"n": n}) for n in range(300)])
        tasks.tenant_work.enqueue_many([(("b",), {"n": n}) for n in range(10)])
        flow = claimer()

        started = flow.claim(["default"], concurrency)
        while len(started) < 2 * concurrency:  # one slot frees at a time
            finish(started[-1])
            started += flow.claim(["default"], 1)

        assert Counter(job.args[0] for job in started) == {"a": 10, "b": 10}

    def test_claims_rotate_between_tenants_one_job_each_per_round(self):
        for tenant in ("x", "y", "z"):
            tasks.tenant_work.enqueue_many([((tenant,), {"n": n}) for n in range(3)])

        claimed = claimer().claim(["default"], 7)

        assert [job.args[0] for job in claimed] == ["x", "y", "z"] * 2 + ["x"]

    def test_rounds_shared_unevenly_give_the_smaller_tenants_all_they_have(self):
        # The walk's counts (where a driver counts) cut each key's take to its share of the
        # rounds: a tenant with fewer jobs than rounds gives what it has, the others fill in.
        for tenant, n in (("x", 1), ("y", 4), ("z", 2)):
            tasks.tenant_work.enqueue_many([((tenant,), {"n": i}) for i in range(n)])

        claimed = claimer().claim(["default"], 6)

        assert [job.args[0] for job in claimed] == ["x", "y", "z", "y", "z", "y"]

    def test_jobs_another_worker_took_after_the_walk_are_made_up_from_the_next_rounds(
        self, monkeypatch
    ):
        # Between the walk and the claim (no transaction without limits) another worker
        # claims the first tenant's jobs: the claim still fills from the others, in rounds.
        for tenant in ("x", "y", "z"):
            tasks.tenant_work.enqueue_many([((tenant,), {"n": n}) for n in range(3)])
        flow = claimer("a")
        flow._limits_met = False  # the last walk met no limit key: this one walks alone
        walk = flow.driver.flow_keys

        def walk_then_lose_x(*args, **kwargs):
            walked = walk(*args, **kwargs)
            Job.objects.filter(args__0="x").update(status="running", lease_owner="b")
            return walked

        monkeypatch.setattr(flow.driver, "flow_keys", walk_then_lose_x)

        claimed = flow.claim(["default"], 4)

        assert sorted(job.args[0] for job in claimed) == ["y", "y", "z", "z"]

    def test_within_a_tenant_priority_orders_its_jobs(self):
        tasks.tenant_work.enqueue_many([(("x",), {"n": n}) for n in range(3)])
        urgent = tasks.tenant_work.using(priority=9).enqueue("x", n=99)

        (first,) = claimer().claim(["default"], 1)

        assert first.id == urgent.pk

    def test_a_paused_queue_gives_no_flow_jobs(self):
        from django_workqueue import operations

        tasks.tenant_work.enqueue("x")
        operations.pause_queue("default")

        assert claimer().claim(["default"], 5) == []


class TestClaimComingShort:
    @pytest.mark.postgres_only  # a row another session holds, skipped (FOR UPDATE SKIP LOCKED)
    @pytest.mark.django_db(transaction=True)  # the claims commit: two workers' sessions
    def test_a_key_that_gave_no_job_never_makes_the_claim_exceed_a_limit(self, monkeypatch):
        # PostgreSQL's walk counts no ready jobs, so the claim cuts each key's take to what
        # its rounds can give (one job each here). A tenant's only job is held by another
        # session, so the claim comes short; it has committed already, letting go of the
        # limit's row, and another worker claims meanwhile. A second claim to make up for
        # the tenant would count the limit from before that worker's claim: three running
        # jobs of a task with concurrency=2.
        import psycopg

        tasks.two_at_a_time.enqueue_many([((), {})] * 6)
        held = tasks.tenant_work.enqueue("zz")
        settings = connection.settings_dict
        other = psycopg.connect(
            host=settings["HOST"] or "127.0.0.1", port=settings["PORT"] or 5432,
            user=settings["USER"], password=settings["PASSWORD"] or None, dbname=settings["NAME"],
        )  # fmt: skip
        other.execute(f"SELECT 1 FROM {Job._meta.db_table} WHERE id = %s FOR UPDATE", [held.id])
        try:
            flow = claimer("a")
            claim_flow = flow.driver.claim_flow
            calls = 0

            def spied(picks, limit, *args, **kwargs):
                nonlocal calls
                calls += 1
                jobs = claim_flow(picks, limit, *args, **kwargs)
                if calls == 1:  # another worker, between this claim's COMMIT and the next

                    def other_worker() -> None:
                        try:
                            claimer("b").claim(["default"], 2)
                        finally:
                            connections.close_all()

                    thread = threading.Thread(target=other_worker)
                    thread.start()
                    thread.join(30)
                return jobs

            monkeypatch.setattr(flow.driver, "claim_flow", spied)
            flow.claim(["default"], 2)
        finally:
            other.rollback()
            other.close()
        running = Job.objects.filter(task_name=tasks.two_at_a_time.name, status="running")
        assert running.count() == 2
        assert flow.held  # it polls soon, as for jobs held back by a limit


class TestCost:
    def test_a_claim_over_more_keys_than_its_size_reads_no_more_jobs_than_it_claims(
        self, monkeypatch
    ):
        # Each key's take is cut to what the rounds can give it before the claim reads (and
        # locks) its jobs: a claim of 4 over 8 tenants takes the first job of the first 4
        # (SQLite: from the walk's counts; PostgreSQL, whose walk counts nothing: each walked
        # key has one; main read and locked 4 jobs of each of the 8). With fewer keys than
        # the claim's size, a key takes at most one job more than the rounds beyond the first.
        for tenant in "abcdefgh":
            tasks.tenant_work.enqueue_many([((tenant,), {"n": n}) for n in range(5)])
        flow = claimer()
        flow._limits_met = False  # no limit keys: the walk alone, then the claim
        takes: list[list[int]] = []
        claim_flow = flow.driver.claim_flow

        def spied(picks, limit, *args, **kwargs):
            takes.append([pick.take for pick in picks])
            return claim_flow(picks, limit, *args, **kwargs)

        monkeypatch.setattr(flow.driver, "claim_flow", spied)

        claimed = flow.claim(["default"], 4)
        assert [job.args[0] for job in claimed] == ["a", "b", "c", "d"]
        assert takes == [[1, 1, 1, 1]]

        Job.objects.exclude(args__0__in=["e", "f"]).delete()
        takes.clear()
        claimed = flow.claim(["default"], 6)
        assert [job.args[0] for job in claimed] == ["e", "f"] * 3
        assert len(takes) == 1 and all(take <= 1 + 6 - 2 for take in takes[0]), takes

        # Fewer jobs than the claim's size: what there is, in one claim (no second one to make
        # up for jobs that never were).
        takes.clear()
        claimed = flow.claim(["default"], 8)
        assert sorted(job.args[0] for job in claimed) == ["e", "e", "f", "f"]
        assert len(takes) == 1, takes

    def test_a_claim_walks_a_bounded_number_of_keys_however_many_there_are(self):
        tasks.one_per_customer.enqueue_many([((n,), {}) for n in range(600)])
        flow = claimer()

        with CaptureQueriesContext(connection) as few_keys_later:
            flow.claim(["default"], 4)
        assert len(flow.claim(["default"], 4)) == 4  # the cursor moved on: other customers

        assert len(few_keys_later.captured_queries) <= 4 + 8 + 10

    def test_keys_seen_for_the_first_time_get_their_limit_rows_made_and_locked_at_once(self):
        # PostgreSQL: one statement makes the new rows and locks the others (main: a lock,
        # an insert, a second lock). SQLite has no row locks: its walk reads the rows there
        # are, and no row is made for a key until a rate's starts are written.
        tasks.one_per_customer.enqueue_many([((n,), {}) for n in range(4)])

        with CaptureQueriesContext(connection) as claim:
            jobs = claimer().claim(["default"], 4)

        locks = driver_for("default").supports_row_locks
        assert len(jobs) == 4 and FlowLimit.objects.count() == (4 if locks else 0)
        on_limits = [q["sql"] for q in claim.captured_queries if FLOW_LIMIT_TABLE in q["sql"]]
        assert len(on_limits) == 1
        assert locks or on_limits[0].startswith("WITH RECURSIVE")  # SQLite: the walk

    @pytest.mark.django_db(transaction=True)
    def test_a_limited_claim_sends_its_statements_with_the_transactions_edges(self):
        # PostgreSQL: BEGIN with the walk, the rows' lock and the count; then the claim with
        # COMMIT: two round trips (main: the walk, BEGIN, the lock, the claim, COMMIT).
        tasks.two_at_a_time.enqueue_many([((), {})] * 4)
        flow = claimer()
        flow.claim(["default"], 1)  # the key's row is made

        with CaptureQueriesContext(connection) as claim:
            assert len(flow.claim(["default"], 1)) == 1

        statements = [q["sql"] for q in claim.captured_queries]
        if connection.vendor == "postgresql":
            assert len(statements) == 2
            assert statements[0].startswith("BEGIN;") and FLOW_LIMIT_TABLE in statements[0]
            assert statements[1].endswith("; COMMIT")
        else:
            # SQLite: the walk reads the rows and counts (twice here: one key is fewer than a
            # walk's steps, so it walks on from the first key), then the claim, which counts
            # the key's running jobs again under the write lock it takes: autocommitted, no
            # transaction around them (main: BEGIN IMMEDIATE before the walk, COMMIT after).
            walks = [s for s in statements if FLOW_LIMIT_TABLE in s]
            assert len(walks) == 2 and all(s.startswith("WITH RECURSIVE") for s in walks)
            assert len(statements) == 3 and statements[2].startswith("UPDATE")
            assert not connection.in_atomic_block

    def test_a_claim_under_per_key_limits_is_a_walk_that_counts_and_a_claim(self):
        # PostgreSQL: BEGIN with the walk, the rows' lock (made for keys seen for the first
        # time) and the count; then the claim with COMMIT. SQLite: the walk reads the walked
        # keys' limit rows and counts their running jobs, then the claim (main: the walk, a
        # statement locking the rows and counting, one making the rows of new keys, the
        # claim). Many keys: one walk, not two.
        tasks.one_per_customer.enqueue_many([((n,), {}) for n in range(100)])
        FlowLimit.objects.bulk_create(
            FlowLimit(key=f"limit:{tasks.one_per_customer.name}:customer:{n}") for n in range(100)
        )
        flow = claimer()

        with CaptureQueriesContext(connection) as known:
            assert len(flow.claim(["default"], 4)) == 4
        FlowLimit.objects.all().delete()
        with CaptureQueriesContext(connection) as new:
            assert len(flow.claim(["default"], 4)) == 4

        def counted(capture: CaptureQueriesContext) -> list[str]:
            edges = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK")
            return [q["sql"] for q in capture.captured_queries
                    if not q["sql"].startswith(edges) or ";" in q["sql"]]  # fmt: skip

        assert len(counted(known)) == 2
        assert len(counted(new)) == 2

    @pytest.mark.django_db(transaction=True)
    def test_a_rate_limited_claim_writes_its_starts_with_the_commit(self):
        # PostgreSQL: the walk (with the database's clock), the claim, then the starts' write
        # with COMMIT: three round trips (main: six, and one more for the clock).
        tasks.twenty_a_second.enqueue_many([((n,), {}) for n in range(4)])
        flow = claimer()
        flow.claim(["default"], 1)  # the key's row is made

        with CaptureQueriesContext(connection) as claim:
            assert len(flow.claim(["default"], 1)) == 1

        statements = [q["sql"] for q in claim.captured_queries]
        [limit] = FlowLimit.objects.all()
        assert sum(n for _, n in limit.starts) == 2
        if connection.vendor == "postgresql":
            assert len(statements) == 3
            assert statements[0].startswith("BEGIN;")
            assert statements[2].startswith("UPDATE") and statements[2].endswith("; COMMIT")

    @pytest.mark.django_db(transaction=True)
    def test_a_walk_that_meets_only_tenants_takes_no_transaction_and_locks_nothing(self):
        # The worker knows limited tasks; once a walk met none of their keys, the next walks
        # alone, as a worker without limits does.
        tasks.tenant_work.enqueue_many([((f"t{n}",), {}) for n in range(8)])
        flow = claimer()
        flow.claim(["default"], 2)

        with CaptureQueriesContext(connection) as claim:
            assert len(flow.claim(["default"], 2)) == 2

        statements = [q["sql"] for q in claim.captured_queries]
        edges = ("BEGIN", "COMMIT", "SAVEPOINT")
        assert not [s for s in statements if FLOW_LIMIT_TABLE in s or s.startswith(edges)]
        assert not [s for s in statements if s.endswith(("; COMMIT", "RELEASE SAVEPOINT"))]
        if connection.vendor == "postgresql":
            assert len(statements) == 2

    def test_limit_keys_met_after_walks_of_tenants_only_are_limited(self):
        tasks.tenant_work.enqueue_many([(("t1",), {})])
        flow = claimer()
        assert len(flow.claim(["default"], 4)) == 1
        assert flow.claim(["default"], 4) == []  # this walk met no limit key
        tasks.two_at_a_time.enqueue_many([((), {})] * 6)

        assert len(flow.claim(["default"], 10)) == 2  # walked alone, then locked
        assert flow.claim(["default"], 10) == []  # walked and locked together
        assert Job.objects.filter(status="running").count() == 3
        # A lock row where rows lock; none on SQLite, whose write lock serialises claims.
        assert FlowLimit.objects.count() == (1 if driver_for("default").supports_row_locks else 0)


FLOW_LIMIT_TABLE = FlowLimit._meta.db_table


@pytest.mark.django_db(transaction=True)
def test_a_failed_limited_claim_leaves_no_transaction_open_nor_its_keys_locked(monkeypatch):
    tasks.two_at_a_time.enqueue_many([((), {})] * 2)

    def broken(*args, **kwargs):
        with connection.cursor() as cursor:  # a database error, with the rows locked
            cursor.execute("SELECT * FROM no_such_table")

    monkeypatch.setattr(FlowClaimer, "_claim", broken)
    with pytest.raises(DatabaseError):
        claimer("a").claim(["default"], 2)
    monkeypatch.undo()

    assert not connection.in_atomic_block and Job.objects.filter(status="ready").count() == 2
    if connection.vendor == "postgresql":
        from psycopg import pq

        assert connection.connection.info.transaction_status == pq.TransactionStatus.IDLE
    other: list[int] = []

    def claim_elsewhere() -> None:
        try:
            other.append(len(claimer("b").claim(["default"], 2)))
        finally:
            connections.close_all()

    thread = threading.Thread(target=claim_elsewhere)
    thread.start()
    thread.join(30)
    assert other == [2]


@pytest.mark.django_db(transaction=True)
def test_a_claim_that_finds_no_keys_ends_its_transaction():
    connection.close()  # a new session: nothing set on it by an earlier claim
    flow = claimer()

    assert flow.claim(["default"], 4) == []
    assert not connection.in_atomic_block
    if connection.vendor == "postgresql":
        from psycopg import pq

        assert connection.connection.info.transaction_status == pq.TransactionStatus.IDLE
    tasks.two_at_a_time.enqueue_many([((), {})] * 3)
    assert len(flow.claim(["default"], 4)) == 2


@pytest.mark.django_db(transaction=True)
def test_a_limited_claim_inside_a_callers_transaction_keeps_it_usable(monkeypatch):
    tasks.two_at_a_time.enqueue_many([((), {})] * 3)
    plain = plain_tasks.add.enqueue(1, 2)

    def broken(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table")

    with transaction.atomic():
        Job.objects.filter(pk=plain.pk).update(priority=5)  # the caller's own write
        assert len(claimer("a").claim(["default"], 1)) == 1
        with monkeypatch.context() as patch:
            patch.setattr(FlowClaimer, "_claim", broken)
            with pytest.raises(DatabaseError):
                claimer("a").claim(["default"], 1)
        assert len(claimer("a").claim(["default"], 1)) == 1  # the transaction still works

    assert Job.objects.get(pk=plain.pk).priority == 5
    assert Job.objects.filter(status="running").count() == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("per_key", [False, True], ids=["one key", "per limit_key"])
def test_concurrent_claimers_never_run_more_than_the_limit(per_key):
    # PostgreSQL: claimers of a key serialise on its FlowLimit row (SKIP LOCKED: the others
    # leave the key alone meanwhile); SQLite: every claim holds the one write lock from the
    # walk's count of the running jobs to its commit.
    if per_key:  # one at a time for each of 6 customers
        jobs = tasks.one_per_customer.enqueue_many([((n % 6,), {}) for n in range(60)])
    else:
        jobs = tasks.two_at_a_time.enqueue_many([((), {})] * 60)
    claimers = 6
    start = threading.Barrier(claimers + 1)
    done = threading.Event()
    most: list[int] = []
    failures: list[BaseException] = []

    def claim_and_finish(name: str) -> None:
        flow = claimer(name)
        try:
            start.wait(10)
            while Job.objects.filter(status__in=["ready", "running"]).exists():
                for job in flow.claim(["default"], 3):
                    finish(job)
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    def sample() -> None:
        try:
            start.wait(10)
            while not done.is_set():
                running = Job.objects.filter(status="running").values_list("flow_key", flat=True)
                most.append(max(Counter(running).values(), default=0))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claim_and_finish, args=(f"c{n}",)) for n in range(claimers)]
    sampler = threading.Thread(target=sample)
    for thread in [*threads, sampler]:
        thread.start()
    for thread in threads:
        thread.join(60)
    done.set()
    sampler.join(10)

    assert failures == []
    assert Job.objects.filter(status="succeeded").count() == len(jobs)
    assert most and max(most) <= (1 if per_key else 2)


class TestWorkflowSteps:
    def test_a_limited_tasks_steps_are_limited_like_its_jobs(self):
        from django_workqueue import group

        group(*[tasks.two_at_a_time.s(0) for _ in range(4)]).enqueue()

        assert set(Job.objects.values_list("flow_key", flat=True)) == {
            f"limit:{tasks.two_at_a_time.name}"
        }
        assert len(claimer().claim(["default"], 10)) == 2

    def test_a_step_whose_key_needs_the_previous_value_is_refused(self):
        from django_workqueue import chain
        from django_workqueue.exceptions import InvalidOption

        with pytest.raises(InvalidOption, match="receives its first argument from earlier steps"):
            chain(plain_tasks.add.s(1, 2), tasks.one_per_customer.s()).enqueue()
        assert not Job.objects.exists()


class TestEdges:
    def test_a_key_with_jobs_in_two_queues_shares_one_limit(self):
        tasks.two_at_a_time.enqueue_many([((), {})] * 3)
        tasks.two_at_a_time.using(queue="mail").enqueue_many([((), {})] * 3)

        claimed = claimer().claim(["default", "mail"], 10)

        assert len(claimed) == 2

    def test_jobs_claimed_between_the_walk_and_the_claim_count_against_the_limit(self, monkeypatch):
        # Where the claim counts each key's running jobs itself (SQLite), the walk's count is
        # read outside any transaction and may be old by the claim: the claim's own count
        # decides. Elsewhere the walk's count is taken under the row lock the claim keeps, and
        # this claimer-inside-a-claimer cannot happen.
        driver = driver_for("default")
        if not driver.supports_capped_flow_claim:
            pytest.skip("PostgreSQL: the claim counts under the FlowLimit row's lock")
        tasks.two_at_a_time.enqueue_many([((), {})] * 6)
        walk = driver.walk_flow_limits
        other: list[int] = []

        def walk_then_another_claims(*args, **kwargs):
            walked = walk(*args, **kwargs)
            if not other:  # after this walk counted no running job: another worker claims 2
                monkeypatch.setattr(driver, "walk_flow_limits", walk)
                other.append(len(claimer("b").claim(["default"], 10)))
            return walked

        monkeypatch.setattr(driver, "walk_flow_limits", walk_then_another_claims)

        assert claimer("a").claim(["default"], 10) == [] and other == [2]
        assert Job.objects.filter(status="running").count() == 2

    def test_picks_of_one_key_in_two_queues_share_the_claims_count_of_its_room(self):
        driver = driver_for("default")
        if not driver.supports_capped_flow_claim:
            pytest.skip("PostgreSQL: the claim counts under the FlowLimit row's lock")
        tasks.two_at_a_time.enqueue_many([((), {})] * 3)
        tasks.two_at_a_time.using(queue="mail").enqueue_many([((), {})] * 3)
        key = f"limit:{tasks.two_at_a_time.name}"
        assert len(claimer().claim(["default"], 1)) == 1  # one running: room for one

        picks = [FlowPick("default", key, 2, 0, 2), FlowPick("mail", key, 2, 1, 2)]
        claimed = driver.claim_flow(picks, 4, "b")

        assert len(claimed) == 1 and Job.objects.filter(status="running").count() == 2

    def test_a_claim_moves_past_keys_at_their_limit_to_keys_with_room(self):
        customers = 40
        tasks.one_per_customer.enqueue_many([((n,), {}) for n in range(customers)] * 2)
        claimer("w1").claim(["default"], 8)
        claimer("w2").claim(["default"], 8)
        late = claimer("w3")

        claimed = []
        for _ in range(4):  # every key walked at its limit moves the cursor past it
            claimed += late.claim(["default"], 8)

        assert len(claimed) == 24  # the other 24 customers, one job each
        assert late.held

    def test_a_key_that_filled_its_room_leaves_its_other_ready_jobs_held(self):
        # two_at_a_time has room for 2: the 2 left behind start when one of those ends,
        # perhaps on another worker, which nothing announces: the claimer says they wait.
        tasks.two_at_a_time.enqueue_many([((), {})] * 4)
        first = claimer()

        assert len(first.claim(["default"], 10)) == 2
        assert first.held

    def test_a_pass_with_one_claim_per_queue_keeps_what_an_earlier_claim_held(self):
        # Per-queue slots claim once per queue in a pass: the claim of an empty queue must not
        # clear what the claim of a full key found.
        tasks.two_at_a_time.enqueue_many([((), {})] * 4)
        worker = Worker(queue_slots={"default": 3, "mail": 1})
        worker.claimer.begin_pass()

        worker.claimer.claim(["default"], 3)
        worker.claimer.claim(["mail"], 1)

        assert worker.claimer.held
        worker.claimer.begin_pass()  # the next pass starts afresh
        assert not worker.claimer.held

    def test_a_key_with_room_for_all_its_ready_jobs_holds_nothing(self):
        tasks.two_at_a_time.enqueue_many([((), {})] * 1)
        first = claimer()

        assert len(first.claim(["default"], 10)) == 1
        assert not first.held

    def test_a_key_its_task_no_longer_declares_is_claimed_without_limits(self):
        job = plain_tasks.add.enqueue(1, 2)
        Job.objects.filter(pk=job.pk).update(flow_key=f"limit:{plain_tasks.add.name}")
        Job.objects.create(task_name="elsewhere.unknown", flow_key="fair:x")

        claimed = claimer().claim(["default"], 5)

        assert [j.id for j in claimed] == [job.pk]  # the unknown task's job is left alone

    def test_replacing_a_waiting_job_gives_it_the_new_arguments_limit_key(self):
        task = tasks.one_per_customer.using(unique_key="sync", on_conflict="replace")
        first = task.enqueue(1)

        task.enqueue(2)

        first.refresh_from_db()
        assert first.flow_key == f"limit:{tasks.one_per_customer.name}:customer:2"


class TestWorkerPass:
    def test_jobs_of_a_first_claim_are_run_when_the_second_claim_fails(self, monkeypatch):
        plain = plain_tasks.add.enqueue(1, 2)
        worker = Worker(queues=["default"], concurrency=4)

        def broken(*args, **kwargs):
            raise RuntimeError("the flow claim failed")

        monkeypatch.setattr(worker.claimer.flow, "claim", broken)
        worker.claimer._flow_first = True  # the next pass runs the plain claim first

        assert [job.id for job in worker._claim(["default"], 4)] == [plain.pk]

    @pytest.mark.django_db(transaction=True)
    def test_a_burst_worker_waits_for_jobs_a_rate_holds_back(self, drain):
        tasks.three_a_second_per_region.enqueue_many([(("eu",), {"n": n}) for n in range(5)])

        drain(queues=["default"], concurrency=4)

        assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}

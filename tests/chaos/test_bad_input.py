"""Bad input everywhere (issue 4, item 11): every abuse is refused with a clear error, nothing is
written, and a worker that meets bad data fails that job and goes on.

Pass criteria, each a number:

1. Payloads over ``MAX_PAYLOAD_BYTES`` (256 KiB + 1 byte of encoded JSON, and 10 MiB) are refused
   by ``enqueue`` and ``enqueue_many`` (one bad item among good ones): 0 SQL statements, 0 rows
   written, and inside the caller's ``transaction.atomic()`` the caller's other writes (2 rows,
   2 jobs) commit. Exactly 256 KiB is accepted.
2. Non-JSON arguments: the error names the argument path and the type (exact messages), 0 rows.
3. A job of a task the code no longer has: failed after exactly its 3 attempts with an error
   saying what to do; the 50 jobs around it all succeed; 0 worker errors logged. Rows that hold
   args/kwargs of the wrong JSON type (not written by enqueue) fail at once, 0 worker errors.
4. A task module that fails to import, in a real ``runworker``: logged exactly 1 time, reported
   by the system check (W006) exactly 1 time, and all 21 jobs of a healthy task succeed.
5. Results that are not JSON or over ``MAX_RESULT_BYTES`` fail the attempt (1 attempt, no retry,
   an ``atomic=True`` task's writes rolled back: 0 rows); the worker goes on.
6. Every other enqueue option an abuser can get wrong is refused with 0 SQL statements; the
   caller's transaction stays usable (on PostgreSQL a failed statement would abort it).

What other modules prove in more detail is only sampled here: the payload walk in
tests/unit/test_payload.py; each enqueue validation with its exact message in
tests/integration/test_enqueue.py; the in-process report of a broken task module in
tests/integration/test_registry.py; NUL and lone surrogates in results, errors and progress in
tests/integration/test_resilience.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import re
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import JSONField, Value
from django.test.utils import CaptureQueriesContext

from django_workqueue import task
from django_workqueue.exceptions import (
    EnqueueError,
    InvalidOption,
    InvalidPriority,
    PayloadNotJSON,
    PayloadTooLarge,
    UnknownQueue,
)
from django_workqueue.models import Job
from django_workqueue.states import TERMINAL
from testproject.testapp.models import Effect
from testproject.testapp.tasks import add
from tests.support.database import fresh
from tests.support.factories import JobFactory
from tests.support.processes import run_manage, wait_for
from tests.support.settings import workqueue_settings

pytestmark = [pytest.mark.chaos]

ADD = "testproject.testapp.tasks.add"
EXC = "django_workqueue.exceptions"
LIMIT = 256 * 1024
TEN_MIB = 10 * 1024 * 1024
# args ["xxx…"] encode as '["' + n * "x" + '"]' (n + 4 bytes) and kwargs {} as '{}' (2 bytes).
OVERHEAD = 6


def text_of(size: int) -> str:
    """The one argument that makes a call's encoded args + kwargs exactly ``size`` bytes."""
    return "x" * (size - OVERHEAD)


@pytest.fixture
def no_sql() -> Iterator[None]:
    """Assert that the block under test sent no statement at all to the database."""
    with CaptureQueriesContext(connection) as queries:
        yield
    assert [q["sql"] for q in queries.captured_queries] == []


@pytest.fixture
def worker_errors(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The worker's log records at ERROR or above (a slot that crashed logs one), except the
    record of a job's final failure (it carries the job id), which is logged by design."""
    caplog.set_level(logging.ERROR, logger="django_workqueue")
    return lambda: [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and not hasattr(r, "job_id")
    ]


# --- tasks only these tests run (registered on import, so in-process workers know them) ---------


@task(max_attempts=3)
def notify(user_id, when=None, tags=(), data=None):
    return user_id


BAD_RESULTS: dict[str, Callable[[], Any]] = {
    "set": lambda: {1, 2},
    "object": object,
    "datetime": lambda: dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
    "nan": lambda: {"ratio": float("nan")},
    "int keys": lambda: {1: "one"},
    "bytes": lambda: b"\x00\x01",
    "huge int": lambda: 10**5000,
    "limit + 1": lambda: "x" * (LIMIT + 1 - 2),  # a JSON string is its text and 2 quotes
    "10 MiB": lambda: "x" * (TEN_MIB - 2),
}


@task(max_attempts=3)
def returns(kind):
    return "x" * (LIMIT - 2) if kind == "limit" else BAD_RESULTS[kind]()


@task(max_attempts=3)
async def returns_async(kind):
    return BAD_RESULTS[kind]()


@task(atomic=True, max_attempts=3)
def returns_atomically(context, kind):
    Effect.objects.create(job_id=context.job_id, attempt=context.attempt, value=kind)
    return BAD_RESULTS[kind]()


# --- 1. payloads over the size limit ------------------------------------------------------------

TOO_LARGE = {
    "256 KiB + 1 byte": (LIMIT + 1, "256.0 KiB (262,145 bytes)"),
    "10 MiB": (TEN_MIB, "10,240.0 KiB (10,485,760 bytes)"),
}


def too_large(owner: str, shown: str) -> str:
    return (
        f"args of {owner} are {shown}; the limit is 256.0 KiB (262,144 bytes) "
        f"(WORKQUEUE['MAX_PAYLOAD_BYTES']). Store large data elsewhere and pass a reference."
    )


@pytest.mark.django_db
def test_a_payload_of_exactly_the_limit_is_accepted_by_enqueue_and_enqueue_many():
    args = [text_of(LIMIT)]
    assert len(json.dumps(args, separators=(",", ":"))) + len("{}") == LIMIT  # the arithmetic
    one = notify.enqueue(*args)
    many = notify.enqueue_many([((1,), {}), (args, {})])
    stored = dict(Job.objects.values_list("pk", "args"))
    assert (stored[one.pk], stored[many[1].pk]) == (args, args)
    assert len(stored) == 3


@pytest.mark.django_db
@pytest.mark.parametrize(("size", "shown"), TOO_LARGE.values(), ids=TOO_LARGE)
def test_an_oversized_payload_is_refused_by_enqueue_before_any_sql(size, shown):
    before = Job.objects.count()
    with CaptureQueriesContext(connection) as queries, pytest.raises(PayloadTooLarge) as raised:
        add.enqueue(text_of(size))
    assert str(raised.value) == too_large(ADD, shown)
    assert queries.captured_queries == []
    assert Job.objects.count() == before == 0


@pytest.mark.django_db
@pytest.mark.parametrize(("size", "shown"), TOO_LARGE.values(), ids=TOO_LARGE)
def test_one_oversized_item_makes_enqueue_many_write_nothing(size, shown):
    calls = [((1, 2), {}), ((3, 4), {}), ((text_of(size),), {}), ((5, 6), {})]
    with CaptureQueriesContext(connection) as queries, pytest.raises(PayloadTooLarge) as raised:
        add.enqueue_many(calls)
    assert str(raised.value) == too_large(f"{ADD} item 2", shown)
    assert queries.captured_queries == []
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_ten_mib_of_nested_arguments_is_refused_naming_its_size():
    # Not the flat fast path: a list of dicts is walked before it is encoded.
    rows = [{"id": n, "text": "y" * 1000} for n in range(10 * 1024)]
    with pytest.raises(PayloadTooLarge, match=r"are 10,[0-9]{3}\.[0-9] KiB \(10,[0-9,]+ bytes\)"):
        notify.enqueue(1, data={"rows": rows})
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_refused_payload_inside_a_transaction_leaves_the_callers_writes_to_commit():
    with transaction.atomic():
        Effect.objects.create(job_id=0, attempt=0, value="before")
        kept = add.enqueue(1, 2)
        for size, shown in TOO_LARGE.values():
            with pytest.raises(PayloadTooLarge, match=re.escape(shown)):
                add.enqueue(text_of(size))
            with pytest.raises(PayloadTooLarge, match="item 1"):
                add.enqueue_many([((1, 2), {}), ((text_of(size),), {})])
        # On PostgreSQL a failed statement would have aborted the transaction: these would raise.
        Effect.objects.create(job_id=0, attempt=0, value="after")
        also = add.enqueue(3, 4)
    assert sorted(Effect.objects.values_list("value", flat=True)) == ["after", "before"]
    assert sorted(Job.objects.values_list("pk", flat=True)) == sorted([kept.pk, also.pk])


# --- 2. arguments that are not JSON -------------------------------------------------------------

NOTIFY = "tests.chaos.test_bad_input.notify"
JSON_ONLY = "Job arguments and results are stored as JSON only."
NOT_JSON: dict[str, tuple[Callable[[], Any], str]] = {
    "datetime": (
        lambda: notify.enqueue(1, when=dt.datetime(2030, 1, 1, tzinfo=dt.UTC)),
        "kwargs['when'] is a datetime.datetime, not JSON (pass value.isoformat())",
    ),
    "date deep inside": (
        lambda: notify.enqueue(1, data={"rows": [{"on": dt.date(2030, 1, 1)}]}),
        "kwargs['data']['rows'][0]['on'] is a datetime.date, not JSON (pass value.isoformat())",
    ),
    "set": (
        lambda: notify.enqueue(1, tags={"a", "b"}),
        "kwargs['tags'] is a builtins.set, not JSON",
    ),
    "object": (lambda: notify.enqueue(object()), "args[0] is a builtins.object, not JSON"),
    "bytes": (
        lambda: notify.enqueue(1, data=b"\x00"),
        "kwargs['data'] is a builtins.bytes, not JSON",
    ),
    "decimal": (
        lambda: notify.enqueue(decimal.Decimal("9.99")),
        "args[0] is a decimal.Decimal, not JSON",
    ),
    "model instance": (
        lambda: notify.enqueue(Job(task_name=ADD)),
        "args[0] is a django_workqueue.models.Job, not JSON",
    ),
    "generator": (
        lambda: notify.enqueue(n for n in range(3)),
        "args[0] is a builtins.generator, not JSON",
    ),
    "nan": (
        lambda: notify.enqueue(1, data={"ratio": float("nan")}),
        "kwargs['data']['ratio'] is nan, which JSON cannot represent",
    ),
    "inf": (lambda: notify.enqueue(float("inf")), "args[0] is inf, which JSON cannot represent"),
    "-inf": (
        lambda: notify.enqueue(1, when=-float("inf")),
        "kwargs['when'] is -inf, which JSON cannot represent",
    ),
    "int keys": (
        lambda: notify.enqueue(1, data={1: "one"}),
        "kwargs['data'] has the key 1 of type int; JSON object keys are strings "
        "(convert the key with str())",
    ),
    "tuple keys": (
        lambda: notify.enqueue([{("a", 1): 2}]),
        "args[0][0] has the key ('a', 1) of type tuple; JSON object keys are strings "
        "(convert the key with str())",
    ),
    "integer too long": (
        lambda: notify.enqueue(1, data=[10**5000]),
        "kwargs['data'][0] is an integer of more than 4,300 digits, which Python cannot write "
        "as JSON text (pass it as a string)",
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize(("call", "problem"), NOT_JSON.values(), ids=NOT_JSON)
def test_a_non_json_argument_is_refused_naming_its_path_and_type(no_sql, call, problem):
    with pytest.raises(PayloadNotJSON) as raised:
        call()
    assert str(raised.value) == f"{NOTIFY}: {problem}. {JSON_ONLY}"
    assert isinstance(raised.value, EnqueueError)


@pytest.mark.django_db
def test_enqueue_many_names_the_item_and_writes_none_of_the_good_ones():
    calls = [((n,), {}) for n in range(10)]
    calls.insert(7, ((1,), {"when": dt.time(12, 0)}))
    with pytest.raises(PayloadNotJSON) as raised:
        notify.enqueue_many(calls)
    assert str(raised.value) == (
        f"{NOTIFY} item 7: kwargs['when'] is a datetime.time, not JSON (pass value.isoformat()). "
        f"{JSON_ONLY}"
    )
    assert Job.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("a\x00b", "contains a NUL character (\\x00), which PostgreSQL cannot store"),
        ("a\ud800b", "contains a lone surrogate, which is not valid UTF-8"),
    ],
    ids=["NUL", "lone surrogate"],
)
def test_text_no_database_can_store_is_refused(no_sql, value, problem):
    with pytest.raises(PayloadNotJSON) as raised:
        notify.enqueue(1, data={"name": value})
    assert str(raised.value) == f"{NOTIFY}: a string in kwargs {problem}."


# --- 3. jobs the worker cannot run: a removed task, a malformed row -----------------------------


def not_registered(name: str, import_errors: str = "") -> str:
    """The error a worker records for a job of a task it does not know."""
    message = (
        f"no task is registered as {name!r} in this worker. If the task still exists, make sure "
        f"the module that defines it is imported (an installed app's tasks.py, or "
        f"WORKQUEUE['TASK_MODULES']) and deploy it to every worker; if its code was removed, "
        f"cancel its jobs. The job is retried until its attempts are spent."
    )
    if import_errors:
        message += f" Task modules that failed to import in this worker: {import_errors}."
    return message


@pytest.mark.django_db(transaction=True)
def test_jobs_of_a_removed_task_fail_after_their_attempts_and_fifty_others_succeed(
    drain, worker_errors
):
    before = add.enqueue_many([((n, 1), {}) for n in range(25)])
    gone = [
        JobFactory(task_name="gone.module.task", args=[n], max_attempts=3, priority=priority)
        for n, priority in enumerate([50, 0, -50])  # claimed first, among, and last
    ]
    after = add.enqueue_many([((n, 1), {}) for n in range(25, 50)])

    with workqueue_settings(RETRY_BACKOFF_BASE=0):  # retried at once, so one drain sees it all
        drain(concurrency=4)

    normal = Job.objects.filter(pk__in=[j.pk for j in before + after])
    assert sorted(normal.values_list("status", "result", "attempt")) == sorted(
        ("succeeded", n + 1, 1) for n in range(50)
    )
    for job in map(fresh, gone):
        assert (job.status, job.attempt, job.result) == ("failed", 3, None)
        assert [(e["attempt"], e["type"]) for e in job.errors] == [
            (n, f"{EXC}.TaskNotRegistered") for n in (1, 2, 3)
        ]
        assert {e["message"] for e in job.errors} == {not_registered("gone.module.task")}
    assert worker_errors() == []


JSON_NULL = Value(None, output_field=JSONField())  # JSON null, not SQL NULL
MALFORMED: dict[str, tuple[Any, Any, str]] = {
    "args a number": (5, {}, "a number and an object"),
    "args an object": ({"a": 1}, {}, "an object and an object"),
    "args a string": ("12", {}, "a string and an object"),
    "args null": (JSON_NULL, {}, "null and an object"),
    "kwargs an array": ([1, 2], [3], "an array and an array"),
    "kwargs a boolean": ([1, 2], True, "an array and a boolean"),
}


@pytest.mark.django_db(transaction=True)
def test_a_row_whose_arguments_cannot_make_a_call_fails_at_once_and_others_run(
    drain, worker_errors
):
    # Rows written by something other than enqueue (raw SQL, another system, a hand edit).
    bad = {
        name: JobFactory(args=args, kwargs=kwargs, max_attempts=3)
        for name, (args, kwargs, _) in MALFORMED.items()
    }
    good = add.enqueue_many([((n, 1), {}) for n in range(20)])

    drain(concurrency=2)

    for name, job in bad.items():
        job = fresh(job)
        assert (job.status, job.attempt) == ("failed", 1), name
        [error] = job.errors
        assert error["type"] == f"{EXC}.MalformedArguments"
        assert error["message"] == (
            f"the job's args must be a JSON array and its kwargs a JSON object, but the row "
            f"holds {MALFORMED[name][2]} (it was not written by enqueue); fix the row or cancel "
            f"the job"
        ), name
    assert Job.objects.filter(pk__in=[j.pk for j in good], status="succeeded").count() == 20
    assert worker_errors() == []


# --- 4. a task module that fails to import, in a real runworker ----------------------------------

BROKEN = "testproject.testapp.broken_tasks"
IMPORT_ERROR = "RuntimeError: settings.PAYMENT_API_KEY is missing"
W006 = (
    f"?: (django_workqueue.W006) Task module {BROKEN} failed to import ({IMPORT_ERROR}); "
    f"its tasks cannot run."
)


@pytest.mark.acceptance
@pytest.mark.django_db(transaction=True)
def test_a_task_module_that_fails_to_import_is_reported_once_and_other_tasks_keep_running(
    start_worker, worker_env
):
    healthy = add.enqueue_many([((n, n), {}) for n in range(20)])
    charge = JobFactory(task_name=f"{BROKEN}.charge", args=[7], max_attempts=1)
    gone = JobFactory(task_name="gone.module.task", max_attempts=1)
    env = {"WORKQUEUE_TASK_MODULES": BROKEN}
    worker = start_worker("--concurrency", "2", env=env)

    wait_for(
        lambda: Job.objects.filter(status__in=TERMINAL).count() == 22,
        alive=[worker], timeout=120, message="all 22 jobs finished",
    )  # fmt: skip
    late = add.enqueue(100, 1)  # after the failures, the worker still takes new work
    wait_for(lambda: fresh(late).status == "succeeded", alive=[worker], timeout=60)
    worker.send(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0

    assert Job.objects.filter(pk__in=[j.pk for j in healthy], status="succeeded").count() == 20
    for job, name in ((fresh(charge), f"{BROKEN}.charge"), (fresh(gone), "gone.module.task")):
        assert (job.status, job.attempt) == ("failed", 1)
        [error] = job.errors
        assert error["type"] == f"{EXC}.TaskNotRegistered"
        assert error["message"] == not_registered(name, f"{BROKEN} ({IMPORT_ERROR})")
    lines = worker.stderr.splitlines()
    logged = [line for line in lines if "could not import task module" in line]
    assert logged == [
        f"could not import task module {BROKEN}: "
        f"RuntimeError('settings.PAYMENT_API_KEY is missing')"
    ]
    assert [line for line in lines if "W006" in line] == [W006]  # runworker runs the checks
    assert "the worker failed to run it" not in worker.stderr

    check = run_manage(["check"], worker_env(**env))
    assert check.returncode == 0, check.stderr  # a warning: the other tasks still work
    assert [line for line in (check.stdout + check.stderr).splitlines() if "W006" in line] == [W006]


# --- 5. results that cannot be stored -----------------------------------------------------------


def result_problem(task_name: str, kind: str) -> str:
    owner = f"{task_name} returned a value that"
    problems = {
        "set": "result is a builtins.set, not JSON",
        "object": "result is a builtins.object, not JSON",
        "datetime": "result is a datetime.datetime, not JSON (pass value.isoformat())",
        "nan": "result['ratio'] is nan, which JSON cannot represent",
        "int keys": "result has the key 1 of type int; JSON object keys are strings "
        "(convert the key with str())",
        "bytes": "result is a builtins.bytes, not JSON",
        "huge int": "result is an integer of more than 4,300 digits, which Python cannot write "
        "as JSON text (pass it as a string)",
    }
    sizes = {"limit + 1": "256.0 KiB (262,145 bytes)", "10 MiB": "10,240.0 KiB (10,485,760 bytes)"}
    if kind in sizes:
        return (
            f"the result of {task_name} is {sizes[kind]}; the limit is 256.0 KiB (262,144 bytes) "
            f"(WORKQUEUE['MAX_RESULT_BYTES']). Store large data elsewhere and pass a reference."
        )
    return f"{owner}: {problems[kind]}. {JSON_ONLY}"


@pytest.mark.django_db(transaction=True)
def test_a_result_that_cannot_be_stored_fails_its_attempt_and_the_worker_goes_on(
    drain, worker_errors
):
    jobs = {kind: returns.enqueue(kind) for kind in BAD_RESULTS}
    async_job = returns_async.enqueue("set")
    atomic_job = returns_atomically.enqueue("object")
    at_limit = returns.enqueue("limit")
    others = add.enqueue_many([((n, 1), {}) for n in range(20)])

    drain(concurrency=2)

    prefix = "tests.chaos.test_bad_input"
    expected = [(job, f"{prefix}.returns", kind) for kind, job in jobs.items()] + [
        (async_job, f"{prefix}.returns_async", "set"),
        (atomic_job, f"{prefix}.returns_atomically", "object"),
    ]
    for job, task_name, kind in expected:
        job = fresh(job)
        assert (job.status, job.attempt, job.result) == ("failed", 1, None), kind  # no retry
        [error] = job.errors
        assert error["type"] == f"{EXC}.ResultNotJSON"
        assert error["message"] == result_problem(task_name, kind)
    assert Effect.objects.filter(job_id=atomic_job.pk).count() == 0  # rolled back with it
    at_limit = fresh(at_limit)
    assert (at_limit.status, len(at_limit.result)) == ("succeeded", LIMIT - 2)
    assert Job.objects.filter(pk__in=[j.pk for j in others], status="succeeded").count() == 20
    assert worker_errors() == []


# --- 6. every other option an abuser can get wrong ----------------------------------------------

UTC_MINUS_5 = dt.timezone(dt.timedelta(hours=-5))
CENTURY = 100 * 365 * 24 * 3600
OPTIONS: dict[str, tuple[Callable[[], Any], type[EnqueueError], str]] = {
    "priority 101": (
        lambda: add.using(priority=101).enqueue(1, 2), InvalidPriority,
        "priority must be an integer from -100 to 100 (higher runs first), got 101",
    ),
    "priority 10**5000": (
        lambda: add.using(priority=10**5000).enqueue(1, 2), InvalidPriority,
        "priority must be an integer from -100 to 100 (higher runs first), "
        "got <an integer of 16,610 bits>",
    ),
    "unknown queue": (
        lambda: add.using(queue="emails").enqueue(1, 2), UnknownQueue,
        "queue 'emails' is not one of WORKQUEUE['QUEUES'] ['default', 'mail', 'reports', 'low']; "
        "add it there or enqueue to one of those",
    ),
    "negative delay": (
        lambda: add.using(delay=-1).enqueue(1, 2), InvalidOption,
        "delay must not be negative, got -1",
    ),
    "NaN delay": (
        lambda: add.using(delay=float("nan")).enqueue(1, 2), InvalidOption,
        f"delay must be a number of seconds up to {CENTURY:,} (100 years), got nan; "
        f"for a fixed time use run_at (or a datetime deadline)",
    ),
    "infinite delay": (
        lambda: add.using(delay=float("inf")).enqueue(1, 2), InvalidOption,
        f"delay must be a number of seconds up to {CENTURY:,} (100 years), got inf; "
        f"for a fixed time use run_at (or a datetime deadline)",
    ),
    "delay past year 9999": (
        lambda: add.using(delay=dt.timedelta(days=999_999_999)).enqueue(1, 2), InvalidOption,
        f"delay must be a number of seconds up to {CENTURY:,} (100 years), "
        f"got datetime.timedelta(days=999999999); for a fixed time use run_at (or a datetime "
        f"deadline)",
    ),
    "delay too large for a float": (
        lambda: add.using(delay=10**400).enqueue(1, 2), InvalidOption,
        f"delay must be a number of seconds up to {CENTURY:,} (100 years), got "
        f"{'1' + '0' * 74}…0000; for a fixed time use run_at (or a datetime deadline)",
    ),
    "deadline past year 9999": (
        lambda: add.using(deadline=1e15).enqueue(1, 2), InvalidOption,
        f"deadline must be a number of seconds up to {CENTURY:,} (100 years), "
        f"got 1000000000000000.0; for a fixed time use run_at (or a datetime deadline)",
    ),
    "run_at after year 9999 in UTC": (
        lambda: add.using(run_at=dt.datetime(9999, 12, 31, 23, tzinfo=UTC_MINUS_5)).enqueue(1, 2),
        InvalidOption,
        "run_at=9999-12-31T23:00:00-05:00 is out of range: in UTC it falls outside the years "
        "1 to 9999",
    ),
    "deadline before year 1 in UTC": (
        lambda: add.using(
            deadline=dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5)))
        ).enqueue(1, 2),
        InvalidOption,
        "deadline=0001-01-01T00:00:00+05:00 is out of range: in UTC it falls outside the years "
        "1 to 9999",
    ),
    "max_attempts 0": (
        lambda: add.using(max_attempts=0).enqueue(1, 2), InvalidOption,
        "max_attempts must be a positive integer, got 0",
    ),
    "max_attempts past the largest budget": (
        lambda: add.using(max_attempts=1_000_001).enqueue(1, 2), InvalidOption,
        "max_attempts must be at most 1,000,000 (the largest budget), got 1000001",
    ),
    "lease_seconds past the column": (
        lambda: add.using(lease_seconds=10**10).enqueue(1, 2), InvalidOption,
        "lease_seconds must be at most 2,147,483,647 (the largest the job table stores), "
        "got 10000000000",
    ),
    "unique_key of 256 characters": (
        lambda: add.using(unique_key="k" * 256).enqueue(1, 2), InvalidOption,
        "unique_key must be a string of 1 to 255 characters",
    ),
    "unique_key of 10 million characters": (
        lambda: add.using(unique_key="k" * 10_000_000).enqueue(1, 2), InvalidOption,
        "unique_key must be a string of 1 to 255 characters",
    ),
    "unique_key with NUL": (
        lambda: add.using(unique_key="order\x007").enqueue(1, 2), InvalidOption,
        "unique_key contains a NUL character (\\x00), which PostgreSQL cannot store",
    ),
    "unique_key with a lone surrogate": (
        lambda: add.using(unique_key="order\ud8007").enqueue(1, 2), InvalidOption,
        "unique_key contains a lone surrogate, which is not valid UTF-8",
    ),
    "NUL in an argument": (
        lambda: add.enqueue("a\x00b", 1), PayloadNotJSON,
        "a string in args contains a NUL character (\\x00), which PostgreSQL cannot store.",
    ),
}  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("call", "error", "message"), OPTIONS.values(), ids=OPTIONS)
def test_a_bad_option_is_refused_before_any_sql(no_sql, call, error, message):
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value) == f"{ADD}: {message}"


@pytest.mark.django_db(transaction=True)
def test_refused_options_leave_the_callers_transaction_usable():
    with transaction.atomic():
        kept = add.enqueue(1, 2)
        refused = 0
        for call, _, _ in OPTIONS.values():
            with pytest.raises(EnqueueError):
                call()
            refused += 1
        Effect.objects.create(job_id=kept.pk, attempt=0, value="after")  # aborted: this raises
    assert refused == len(OPTIONS)
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
    assert Effect.objects.count() == 1


@pytest.mark.django_db
def test_the_largest_values_the_limits_allow_are_stored_and_read_back():
    last_second = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC)
    delayed = add.using(
        delay=CENTURY, deadline=dt.timedelta(seconds=CENTURY), max_attempts=1_000_000,
        lease_seconds=2**31 - 1, unique_key="k" * 255, priority=-100,
    ).enqueue(1, 2)  # fmt: skip
    scheduled = add.using(run_at=last_second, deadline=last_second, priority=100).enqueue(3, 4)
    rows = {job.pk: job for job in Job.objects.all()}  # every row can be read back
    stored = rows[delayed.pk]
    assert stored.run_after - stored.enqueued_at == dt.timedelta(seconds=CENTURY)
    assert (stored.max_attempts, stored.lease_seconds) == (1_000_000, 2**31 - 1)
    assert (rows[scheduled.pk].run_after, rows[scheduled.pk].deadline) == (last_second,) * 2

"""Attempt middlewares (``WORKQUEUE["MIDDLEWARE"]``): their order, what their exceptions mean,
when they are built, the setting's check, and the two shipped ones (SQLite and PostgreSQL).

OpenTelemetry is tested with the SDK's in-memory exporter (``opentelemetry-sdk``, in the
``test`` extra), skipped where it is not installed.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_workqueue.checks import check_settings
from django_workqueue.middleware import FIELDS
from django_workqueue.worker.runner import Worker
from tests.support import middlewares
from tests.support.database import fresh
from tests.support.middlewares import logs_inside, logs_inside_async, noted
from tests.support.settings import workqueue_settings

pytestmark = pytest.mark.django_db(transaction=True)

M = "tests.support.middlewares"
LOGGING_CONTEXT = "django_workqueue.middleware.logging_context"
OTEL = "django_workqueue.middleware.opentelemetry_span"


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    middlewares.EVENTS.clear()
    middlewares.BUILT.clear()
    yield
    middlewares.EVENTS.clear()


def test_the_first_listed_middleware_is_the_outermost(drain):
    with workqueue_settings(MIDDLEWARE=[f"{M}.outer", f"{M}.inner"]):
        job = noted.enqueue()
        drain()

    assert middlewares.EVENTS == ["outer in #1", "inner in #1", "body", "inner out", "outer out"]
    assert (fresh(job).status, fresh(job).result) == ("succeeded", "done")


def test_the_bodys_exception_passes_through_every_middleware_and_fails_the_job(drain):
    with workqueue_settings(MIDDLEWARE=[f"{M}.outer", f"{M}.inner"]):
        job = noted.enqueue(fail=True)
        drain()

    assert middlewares.EVENTS == [
        "outer in #1", "inner in #1", "body", "inner saw ValueError", "outer saw ValueError",
    ]  # fmt: skip
    job = fresh(job)
    assert job.status == "failed"
    assert [(e["type"], e["message"]) for e in job.errors] == [
        ("builtins.ValueError", "the body failed")
    ]


def test_a_middlewares_exception_is_the_attempts_exception(drain):
    with workqueue_settings(MIDDLEWARE=[f"{M}.outer", f"{M}.raises_before"]):
        job = noted.enqueue()
        drain()

    assert middlewares.EVENTS == ["outer in #1", "outer saw PermissionError"]  # no body
    job = fresh(job)
    assert job.status == "failed"
    assert [(e["type"], e["message"]) for e in job.errors] == [
        ("builtins.PermissionError", "refused by a middleware")
    ]


def test_a_middleware_may_snooze_the_attempt_like_the_body(drain):
    with workqueue_settings(MIDDLEWARE=[f"{M}.snoozes_first_attempt"]):
        job = noted.enqueue()
        drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.errors) == ("succeeded", 2, [])
    assert middlewares.EVENTS == ["body"]  # the first attempt never reached it


def test_a_middleware_that_does_not_call_next_returns_the_result_itself(drain):
    with workqueue_settings(MIDDLEWARE=[f"{M}.answers_itself"]):
        job = noted.enqueue()
        drain()

    assert (fresh(job).status, fresh(job).result) == ("succeeded", {"from": "middleware"})
    assert middlewares.EVENTS == []


def test_middlewares_are_built_once_per_process_and_again_when_the_setting_changes(drain):
    with workqueue_settings(MIDDLEWARE=[f"{M}.outer", f"{M}.inner"]):
        noted.enqueue_many([((), {}), ((), {}), ((), {})])
        drain()
        drain()
    assert middlewares.BUILT == ["inner", "outer"]  # innermost first, once

    with workqueue_settings(MIDDLEWARE=[f"{M}.inner"]):
        noted.enqueue()
        drain()
    assert middlewares.BUILT == ["inner", "outer", "inner"]


def test_an_atomic_tasks_body_runs_inside_the_middlewares(drain):
    from testproject.testapp.models import Effect
    from testproject.testapp.tasks import atomic_effect

    with workqueue_settings(MIDDLEWARE=[f"{M}.outer"]):
        ok = atomic_effect.enqueue(value="kept")
        drain()

    assert middlewares.EVENTS == ["outer in #1", "outer out"]
    assert fresh(ok).status == "succeeded"
    assert list(Effect.objects.values_list("value", flat=True)) == ["kept"]


def test_a_middleware_that_raises_after_an_atomic_body_rolls_the_body_back(drain):
    from testproject.testapp.models import Effect
    from testproject.testapp.tasks import atomic_effect

    with workqueue_settings(MIDDLEWARE=[f"{M}.raises_after"]):
        job = atomic_effect.using(max_attempts=1).enqueue(value="undone")
        drain()

    job = fresh(job)
    assert job.status == "failed"
    assert [e["type"] for e in job.errors] == ["builtins.PermissionError"]
    assert not Effect.objects.exists()


def test_a_middleware_may_call_on_from_another_thread(drain):
    with workqueue_settings(MIDDLEWARE=[f"{M}.outer", f"{M}.in_another_thread"]):
        job = noted.enqueue()
        drain()

    assert middlewares.EVENTS == ["outer in #1", "body", "outer out"]
    assert fresh(job).status == "succeeded"


def test_a_worker_with_a_middleware_that_cannot_be_imported_does_not_start():
    with (
        workqueue_settings(MIDDLEWARE=[f"{M}.missing"]),
        pytest.raises(ImproperlyConfigured, match=r"names 'tests.support.middlewares.missing'"),
    ):
        Worker(burst=True)


def test_a_factory_that_returns_no_callable_is_refused_at_worker_start():
    with (
        workqueue_settings(MIDDLEWARE=[f"{M}.returns_none"]),
        pytest.raises(ImproperlyConfigured, match="returned None, not a callable"),
    ):
        Worker(burst=True)


# --- the system check -----------------------------------------------------------------------


def e020(setting: object) -> list[str]:
    with workqueue_settings(MIDDLEWARE=setting):
        return [m.msg for m in check_settings() if m.id == "django_workqueue.E020"]


def test_the_check_accepts_importable_factories():
    assert e020([f"{M}.outer", LOGGING_CONTEXT]) == []


def test_the_check_names_each_bad_middleware_entry():
    assert e020("tests.support.middlewares.outer") == [
        "WORKQUEUE['MIDDLEWARE'] must be a list of dotted paths, got "
        "'tests.support.middlewares.outer'."
    ]
    messages = e020([f"{M}.missing", f"{M}.not_callable", 3])
    assert messages[0].startswith(
        "WORKQUEUE['MIDDLEWARE'] names 'tests.support.middlewares.missing', which cannot be "
        "imported"
    )
    assert messages[1:] == [
        "WORKQUEUE['MIDDLEWARE'] names 'tests.support.middlewares.not_callable', which is not "
        "callable.",
        "WORKQUEUE['MIDDLEWARE'] holds 3, not a dotted path.",
    ]


def test_the_check_says_when_opentelemetry_is_not_installed(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "opentelemetry" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert e020([OTEL]) == [
        f"WORKQUEUE['MIDDLEWARE'] names '{OTEL}', but opentelemetry-api is not installed: "
        "pip install 'django-workqueue[otel]'."
    ]


# --- logging context ------------------------------------------------------------------------


def test_log_records_made_inside_a_job_carry_the_job(drain, caplog):
    with workqueue_settings(MIDDLEWARE=[LOGGING_CONTEXT]), caplog.at_level(logging.WARNING):
        job = logs_inside.enqueue()
        worker = drain()
        logging.getLogger("tests.support.outside").warning("outside any job")

    [inside] = [r for r in caplog.records if r.getMessage() == "inside a job"]
    assert {field: getattr(inside, field) for field in FIELDS} == {
        "workqueue_job_id": job.pk,
        "workqueue_task": logs_inside.name,
        "workqueue_attempt": 1,
        "workqueue_queue": "default",
        "workqueue_worker_id": worker.id,
    }
    [outside] = [r for r in caplog.records if r.getMessage() == "outside any job"]
    assert {field: getattr(outside, field) for field in FIELDS} == dict.fromkeys(FIELDS)


def test_log_records_of_an_async_task_carry_the_job(drain, caplog):
    with workqueue_settings(MIDDLEWARE=[LOGGING_CONTEXT]), caplog.at_level(logging.WARNING):
        job = logs_inside_async.enqueue()
        drain()

    [inside] = [r for r in caplog.records if r.getMessage() == "inside an async job"]
    assert (inside.workqueue_job_id, inside.workqueue_task) == (job.pk, logs_inside_async.name)


def test_the_documented_format_string_formats_records_inside_and_outside_jobs(drain, caplog):
    formatter = logging.Formatter(
        "%(levelname)s [job %(workqueue_job_id)s %(workqueue_task)s "
        "#%(workqueue_attempt)s] %(message)s"
    )
    with workqueue_settings(MIDDLEWARE=[LOGGING_CONTEXT]), caplog.at_level(logging.WARNING):
        job = logs_inside.enqueue()
        drain()
        logging.getLogger("tests.support.outside").warning("outside any job")

    lines = [formatter.format(r) for r in caplog.records if r.name.startswith("tests.support")]
    assert lines == [
        f"WARNING [job {job.pk} {logs_inside.name} #1] inside a job",
        "WARNING [job None None #None] outside any job",
    ]


# --- OpenTelemetry ---------------------------------------------------------------------------


_exporter = None


@pytest.fixture
def spans():
    """The SDK's in-memory exporter, installed once on the process's tracer provider (the
    global provider can be set only once), emptied for each test."""
    global _exporter
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if _exporter is None:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        _exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def test_each_attempt_is_a_span_with_the_jobs_attributes(drain, spans):
    from opentelemetry.trace import SpanKind, StatusCode

    with workqueue_settings(MIDDLEWARE=[OTEL]):
        ok = noted.enqueue()
        failing = noted.enqueue(fail=True)
        worker = drain(concurrency=1)
    finished = {s.attributes["workqueue.job_id"]: s for s in spans.get_finished_spans()}

    assert set(finished) == {ok.pk, failing.pk}
    span = finished[ok.pk]
    assert (span.name, span.kind) == (f"workqueue {noted.name}", SpanKind.CONSUMER)
    assert dict(span.attributes) == {
        "workqueue.job_id": ok.pk, "workqueue.task": noted.name, "workqueue.attempt": 1,
        "workqueue.queue": "default", "workqueue.worker_id": worker.id,
    }  # fmt: skip
    assert span.status.status_code == StatusCode.UNSET
    failed = finished[failing.pk]
    assert failed.status.status_code == StatusCode.ERROR
    [event] = failed.events
    assert (event.name, event.attributes["exception.message"]) == ("exception", "the body failed")


def test_a_snoozed_attempts_span_is_not_an_error(drain, spans):
    from opentelemetry.trace import StatusCode

    with workqueue_settings(MIDDLEWARE=[OTEL, f"{M}.snoozes_first_attempt"]):
        job = noted.enqueue()
        drain()

    attempts = sorted(
        (s.attributes["workqueue.attempt"], s.status.status_code)
        for s in spans.get_finished_spans()
    )
    assert attempts == [(1, StatusCode.UNSET), (2, StatusCode.UNSET)]
    assert fresh(job).status == "succeeded"


def test_the_span_middleware_without_opentelemetry_refuses_to_start(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import fails as if not installed
    with (
        workqueue_settings(MIDDLEWARE=[OTEL]),
        pytest.raises(ImproperlyConfigured, match=r"pip install 'django-workqueue\[otel\]'"),
    ):
        Worker(burst=True)

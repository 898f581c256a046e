"""Prometheus (SQLite and PostgreSQL): the metrics view is denied by default, serves what
``stats.snapshot()`` says in a format Prometheus' own parser reads, and a worker counts its own
attempts for a scraper that reads it directly."""

from __future__ import annotations

import io
import urllib.request
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command

from django_workqueue import stats
from django_workqueue.models import WorkerProcess
from testproject.testapp.tasks import add
from tests.support.factories import JobFactory
from tests.support.observability_tasks import discards
from tests.support.settings import workqueue_settings

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from django_workqueue import metrics  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/workqueue/metrics"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_view_is_denied_to_anonymous_requests_and_users_without_the_permission(
    client: Any,
) -> None:
    anonymous = client.get(URL)
    assert anonymous.status_code == 401 and "Bearer" in anonymous["WWW-Authenticate"]
    client.force_login(User.objects.create_user("staff", is_staff=True))
    assert client.get(URL).status_code == 403


def test_a_user_with_view_job_reads_the_metrics(client: Any) -> None:
    user = User.objects.create_user("ops")
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(user)
    response = client.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")


def test_a_scraper_with_the_bearer_token_reads_them_and_a_wrong_token_is_refused(
    client: Any,
) -> None:
    with workqueue_settings(METRICS_TOKEN="s3cret-s3cret-s3cret"):
        assert client.get(URL, HTTP_AUTHORIZATION="Bearer s3cret-s3cret-s3cret").status_code == 200
        assert client.get(URL, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    # No token configured: a bearer header opens nothing.
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_the_metrics_say_what_the_snapshot_says(client: Any, drain: Any) -> None:
    for n in range(3):
        add.enqueue(n, n)
    discards.enqueue()
    drain()
    JobFactory.create_batch(2, task_name=add.name, status="ready")
    JobFactory(task_name=add.name, status="held")
    WorkerProcess.objects.create(id="w1", host="h1", pid=1, queues=["default"], concurrency=4,
                                 running=3)  # fmt: skip

    with workqueue_settings(METRICS_TOKEN="t" * 16):
        text = client.get(URL, HTTP_AUTHORIZATION="Bearer " + "t" * 16).content.decode()
    snap = stats.snapshot()

    found = samples(text)
    task = snap.task(add.name, "default")
    assert task is not None

    def value(name: str, **labels: str) -> float:
        return found[(name, frozenset(labels.items()))]

    key = {"queue": "default", "task": add.name}
    assert value("workqueue_task_jobs", **key, status="ready") == task.counts["ready"] == 2
    assert value("workqueue_task_jobs", **key, status="held") == 1
    assert value("workqueue_task_backlog", **key) == task.backlog
    assert value("workqueue_task_ended_attempts", **key, ending="succeeded", window="5m") == 3
    assert value("workqueue_queue_ended_attempts", queue="default", ending="failed",
                 window="15m") == 1  # fmt: skip
    assert value("workqueue_queue_failure_ratio", queue="default", window="1m") == 0.25
    assert ("workqueue_task_run_seconds", frozenset({**key, "window": "5m",
            "quantile": "0.95"}.items())) in found  # fmt: skip
    assert value("workqueue_worker_slots", worker="w1", host="h1") == 4
    assert value("workqueue_worker_running", worker="w1", host="h1") == 3


@pytest.fixture
def served() -> Iterator[metrics.WorkerMetrics]:
    worker_metrics = metrics.serve_worker_metrics(0, address="127.0.0.1")
    yield worker_metrics
    worker_metrics.stop()


def test_a_worker_serves_the_attempts_it_recorded(
    served: metrics.WorkerMetrics, drain: Any
) -> None:
    for n in range(4):
        add.enqueue(n, n)
    discards.enqueue()
    drain()

    with urllib.request.urlopen(f"http://127.0.0.1:{served.port}/metrics", timeout=10) as page:
        found = samples(page.read().decode())

    def value(name: str, **labels: str) -> float:
        return found[(name, frozenset(labels.items()))]

    key = {"queue": "default", "task": add.name}
    assert value("workqueue_worker_attempts_total", **key, ending="succeeded") == 4
    assert value("workqueue_worker_attempts_total", queue="default", task=discards.name,
                 ending="failed") == 1  # fmt: skip
    assert value("workqueue_worker_run_seconds_count", **key) == 4


def test_a_worker_serves_its_metrics_on_loopback_unless_told_otherwise() -> None:
    """The page has no authentication: only this host reaches it by default."""
    served = metrics.serve_worker_metrics(0)
    try:
        assert served.address == "127.0.0.1"
    finally:
        served.stop()


def test_runworker_metrics_address_defaults_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    from django_workqueue.management.commands import runworker
    from django_workqueue.worker import stop_signals

    served: list[tuple[int, str]] = []
    monkeypatch.setattr(metrics, "serve_worker_metrics", lambda *args: served.append(args))
    monkeypatch.setattr(
        runworker,
        "Worker",
        mock.MagicMock(return_value=mock.MagicMock(id="w", processes=None, misconfigured=None)),
    )
    monkeypatch.setattr(stop_signals.signal, "signal", lambda *args: None)  # the test's own stay
    monkeypatch.setattr(runworker, "configure_logging", lambda verbosity: None)

    call_command("runworker", "--burst", "--metrics-port", "9400", stdout=io.StringIO())
    call_command(
        "runworker", "--burst", "--metrics-port", "9400", "--metrics-address", "0.0.0.0",
        stdout=io.StringIO(),
    )  # fmt: skip

    assert served == [(9400, "127.0.0.1"), (9400, "0.0.0.0")]


def test_without_the_extra_the_view_says_what_to_install(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    import django_workqueue

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails as uninstalled
    monkeypatch.delitem(sys.modules, "django_workqueue.metrics")
    monkeypatch.delattr(django_workqueue, "metrics")
    with workqueue_settings(METRICS_TOKEN="t" * 16):
        response = client.get(URL, HTTP_AUTHORIZATION="Bearer " + "t" * 16)
    assert response.status_code == 501
    assert b'pip install "django-workqueue[prometheus]"' in response.content

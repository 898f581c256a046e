"""``runworker --metrics-port``: a real worker process serves its own attempts in Prometheus'
format while it runs (SQLite and PostgreSQL)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from testproject.testapp.tasks import add
from tests.support.processes import wait_for

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def succeeded(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            text = page.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return -1.0
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "workqueue_worker_attempts_total"
        and sample.labels.get("ending") == "succeeded"
        and sample.labels.get("task") == add.name
    )


def test_a_worker_serves_the_attempts_it_recorded(start_worker: Any) -> None:
    port = free_port()
    worker = start_worker("--metrics-port", str(port), "--concurrency", "2")
    worker.wait_started()
    for n in range(6):
        add.enqueue(n, n)

    wait_for(lambda: succeeded(port) == 6, alive=[worker], timeout=30,
             message="6 succeeded attempts on the worker's metrics page")  # fmt: skip

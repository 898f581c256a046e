"""Prometheus metrics: the fleet's stats for a scraper (``exposition()``), and this process's
own counters for a worker scraped directly (``serve_worker_metrics``).

Needs the optional extra: ``pip install "django-workqueue[prometheus]"``. The core never
imports this module; ``django_workqueue.views.metrics`` imports it when called.

Fleet metrics are computed at scrape time from ``stats.snapshot()`` (index-only queries and the
rolling counters: a scrape never scans the jobs table). Windowed figures are gauges with a
``window`` label (``1m``, ``5m``, ``15m``); durations are summaries' quantiles (0.5, 0.95).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

try:
    import prometheus_client
    from prometheus_client.core import CollectorRegistry, GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - the base install's error
    raise ImportError(
        "django_workqueue.metrics needs prometheus-client: pip install "
        '"django-workqueue[prometheus]"'
    ) from exc

from . import stats
from .db import Outcome, Recorded
from .operations import workers
from .stats import counters

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST


class StatsCollector(Collector):
    """Every queue's and task's ``stats.snapshot()``, and the worker registry, at each scrape."""

    def __init__(self, alias: str | None = None) -> None:
        self.alias = alias

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = stats.snapshot(alias=self.alias)
        for scope, rows in (("queue", snap.queues), ("task", snap.tasks)):
            yield from _families(scope, rows)
        yield from _workers(self.alias)


def _families(scope: str, rows: Sequence[stats.Stats]) -> Iterator[GaugeMetricFamily]:
    labels = ["queue"] if scope == "queue" else ["queue", "task"]
    prefix = f"workqueue_{scope}"

    def gauge(name: str, doc: str, extra: Sequence[str] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"{prefix}_{name}", doc, labels=[*labels, *extra])

    jobs = gauge("jobs", "Unfinished jobs by status.", ["status"])
    backlog = gauge("backlog", "Jobs ready and due.")
    oldest = gauge("oldest_ready_age_seconds", "Seconds the oldest ready job has been due.")
    ended = gauge("ended_attempts", "Attempts that ended, per window.", ["ending", "window"])
    throughput = gauge("throughput_per_second", "Jobs finished per second.", ["window"])
    failure = gauge("failure_ratio", "Failed attempts per attempt ended.", ["window"])
    wait = gauge("wait_seconds", "From due to start of an attempt.", ["window", "quantile"])
    run = gauge("run_seconds", "How long an attempt ran.", ["window", "quantile"])
    for row in rows:
        key = [row.queue] if scope == "queue" else [row.queue, row.task_name or ""]
        for status, n in row.counts.items():
            jobs.add_metric([*key, status], n)
        backlog.add_metric(key, row.backlog)
        if row.oldest_ready_age is not None:
            oldest.add_metric(key, row.oldest_ready_age)
        for window in row.windows:
            w = f"{window.minutes}m"
            for ending in counters.ENDINGS:
                ended.add_metric([*key, ending, w], getattr(window, ending))
            throughput.add_metric([*key, w], window.throughput)
            if window.failure_rate is not None:
                failure.add_metric([*key, w], window.failure_rate)
            for family, p50, p95 in (
                (wait, window.wait_p50, window.wait_p95),
                (run, window.run_p50, window.run_p95),
            ):
                for quantile, value in (("0.5", p50), ("0.95", p95)):
                    if value is not None:
                        family.add_metric([*key, w, quantile], value)
    yield from (jobs, backlog, oldest, ended, throughput, failure, wait, run)


def _workers(alias: str | None) -> Iterator[GaugeMetricFamily]:
    slots = GaugeMetricFamily(
        "workqueue_worker_slots", "Slots of each live worker.", labels=["worker", "host"]
    )
    running = GaugeMetricFamily(
        "workqueue_worker_running", "Jobs each live worker ran at its last heartbeat.",
        labels=["worker", "host"],
    )  # fmt: skip
    rows = workers(alias=alias).values_list("id", "host", "concurrency", "running")
    for worker_id, host, concurrency, busy in rows:
        slots.add_metric([worker_id, host], concurrency)
        running.add_metric([worker_id, host], busy)
    yield slots
    yield running


def exposition(alias: str | None = None) -> bytes:
    """The fleet's metrics in Prometheus' text format (what the view returns)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(alias))
    return prometheus_client.generate_latest(registry)


# --- a worker's own metrics (runworker --metrics-port) -------------------------------------------


class WorkerMetrics:
    """This process's counters: attempts recorded and their run times, by queue and task."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.server: Any = None
        self.attempts = prometheus_client.Counter(
            "workqueue_worker_attempts", "Attempts this process recorded, by how they ended.",
            ["queue", "task", "ending"], registry=self.registry,
        )  # fmt: skip
        self.run_seconds = prometheus_client.Histogram(
            "workqueue_worker_run_seconds", "How long the attempts this process recorded ran.",
            ["queue", "task"], registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
        )  # fmt: skip

    def observe(self, outcomes: Sequence[Outcome], recorded: Recorded) -> None:
        kinds = {(o.job_id, o.attempt): o.kind for o in outcomes}
        for timing in recorded.timings:
            ending = counters.ending(kinds.get((timing.id, timing.attempt)), timing.status)
            if ending is None:
                continue
            self.attempts.labels(timing.queue, timing.task_name, ending).inc()
            if timing.run_seconds is not None and timing.run_seconds >= 0:
                self.run_seconds.labels(timing.queue, timing.task_name).observe(timing.run_seconds)

    def stop(self) -> None:
        """Stop counting and serving (tests; a worker serves until it exits)."""
        with contextlib.suppress(ValueError):
            counters.remove_listener(self.observe)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def port(self) -> int | None:
        return None if self.server is None else int(self.server.server_port)

    @property
    def address(self) -> str | None:
        """The address it listens on."""
        return None if self.server is None else str(self.server.server_address[0])


LOOPBACK = "127.0.0.1"


def serve_worker_metrics(port: int, address: str = LOOPBACK) -> WorkerMetrics:
    """Count this process's attempts and serve them on ``port`` (any path) from a daemon
    thread; returns the ``WorkerMetrics`` (``port`` 0: any free port, see ``.port``).

    Loopback only by default, for a local agent: the page has no authentication, so an
    ``address`` another host can reach (``"0.0.0.0"``, every interface, as a scraper reaching
    a container needs) shows this worker's counters (queue and task names, attempts, run
    times) to anyone on that network; keep it to a private network or behind a firewall."""
    metrics = WorkerMetrics()
    metrics.server, _ = prometheus_client.start_http_server(
        port, addr=address, registry=metrics.registry
    )
    counters.add_listener(metrics.observe)
    return metrics

"""Client actions of the long drain under churn (``bench/long_drain.py``): the feeder, and
retention's purge on demand. Run in ``python -m bench.client``; Django is set up here."""

from __future__ import annotations

import time

from .workqueue import _noop


def client_feed(total: int, backlog: int, chunk: int) -> int:
    """Enqueue ``total`` no-op jobs, ``chunk`` per ``enqueue_many`` call, whenever fewer than
    ``backlog - chunk`` are ready (a producer that keeps the workers fed, never far ahead);
    return how many were enqueued."""
    noop = _noop()
    from django_workqueue.models import Job

    ready = Job.objects.filter(status="ready", flow_key__isnull=True)  # the claim index
    sent = 0
    while sent < total:
        if ready.count() > backlog - chunk:
            time.sleep(0.2)  # a chunk lasts seconds; a count costs the drain's server
            continue
        n = min(chunk, total - sent)
        noop.enqueue_many([((key,), {}) for key in range(sent, sent + n)])
        sent += n
    return sent


def client_purge(seconds: float) -> int:
    """Retention's purge now (``retention.purge``, what the maintainer runs), succeeded jobs
    older than ``seconds``; return how many jobs it deleted."""
    _noop()
    from django_workqueue.maintenance.retention import Policy, purge

    return purge(policy=Policy.from_days({"succeeded": seconds / 86400})).total

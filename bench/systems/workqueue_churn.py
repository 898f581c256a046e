"""Client actions of the long drain under churn (``bench/long_drain.py``): the feeder, and
retention's purge on demand. Run in ``python -m bench.client``; Django is set up here."""

from __future__ import annotations

import time

from .workqueue import _noop


def client_feed(total: int, backlog: int, chunk: int, rate: float = 0.0) -> int:
    """Enqueue ``total`` no-op jobs, ``chunk`` per ``enqueue_many`` call; return how many.

    ``rate`` > 0: a steady producer, ``rate`` jobs/s (a chunk every ``chunk / rate`` seconds,
    on a fixed schedule), that waits while more than ``backlog`` are ready (the workers are
    behind). ``rate`` 0: as fast as the workers take them, a chunk whenever fewer than
    ``backlog - chunk`` are ready.
    """
    noop = _noop()
    from django_workqueue.models import Job

    ready = Job.objects.filter(status="ready", flow_key__isnull=True)  # the claim index
    ceiling = backlog if rate > 0 else backlog - chunk
    sent = 0
    due = time.monotonic()
    while sent < total:
        if rate > 0 and time.monotonic() < due:
            time.sleep(due - time.monotonic())
            continue
        if ready.count() > ceiling:
            time.sleep(0.2)  # a chunk lasts a while; a count costs the drain's server
            continue
        n = min(chunk, total - sent)
        noop.enqueue_many([((key,), {}) for key in range(sent, sent + n)])
        sent += n
        due = max(due + n / rate, time.monotonic() - 1.0) if rate > 0 else due
    return sent


def client_purge(seconds: float) -> int:
    """Retention's purge now (``retention.purge``, what the maintainer runs), succeeded jobs
    older than ``seconds``; return how many jobs it deleted."""
    _noop()
    from django_workqueue.maintenance.retention import Policy, purge

    return purge(policy=Policy.from_days({"succeeded": seconds / 86400})).total

"""Tasks under flow control (limits, rates, fairness), for the flow tests.

Not imported by the test app: a worker runs them when ``WORKQUEUE_TASK_MODULES`` names this
module, and the in-process tests register them only while they run
(``tests.support.flow.flow_tasks``), so that other tests' workers take the plain claim alone.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django_workqueue import task
from testproject.testapp.models import LedgerEntry


def _started(context: Any, note: str) -> None:
    """A ledger row as the body starts: the order bodies started in is the rows' id order."""
    LedgerEntry.objects.create(
        job_id=context.job.id, attempt=context.attempt, pid=os.getpid(), note=note
    )


@task(concurrency=2, max_attempts=3, backoff=0, lease_seconds=2)
def two_at_a_time(seconds: float = 0.0) -> None:
    time.sleep(seconds)


@task(concurrency=1, limit_key=lambda customer_id, **kw: f"customer:{customer_id}", lease_seconds=2)
def one_per_customer(customer_id: int, seconds: float = 0.0) -> None:
    time.sleep(seconds)


@task(rate="20/s", max_attempts=1)
def twenty_a_second(n: int = 0) -> None:
    return None


@task(rate="3/s", limit_key=lambda region, **kw: region, max_attempts=1)
def three_a_second_per_region(region: str, n: int = 0) -> None:
    return None


@task(fair_key=lambda tenant, **kw: tenant, max_attempts=1)
def tenant_work(context: Any, tenant: str, n: int = 0, seconds: float = 0.0) -> None:
    _started(context, tenant)
    time.sleep(seconds)

"""Helpers for your own test suite: run jobs in the test's thread and assert what was enqueued.

>>> from django_workqueue.testing import assert_enqueued, drain
>>> order.confirm()                      # enqueues send_receipt(order.pk)
>>> assert_enqueued(send_receipt, args=[order.pk])
>>> drain()                              # runs it (and every job it releases) right here

Jobs run through the worker's own attempt runner (``attempt``: middlewares, retries,
workflow releases, the recorded outcome) on the calling thread and its database connection, so
``drain()`` works inside a plain ``django.test.TestCase`` on SQLite and PostgreSQL: no worker
thread or process has to see the test's uncommitted transaction. ``WORKQUEUE["EAGER"] = True``
runs jobs as soon as their enqueue commits, through the same code. The pytest plugin
(``django_workqueue.testing.pytest_plugin``, registered by installing the package) offers these
as fixtures. See docs/guides/testing.md.
"""

from .assertions import assert_enqueued, assert_not_enqueued, enqueued_jobs
from .runner import drain, run_job

__all__ = ["assert_enqueued", "assert_not_enqueued", "drain", "enqueued_jobs", "run_job"]

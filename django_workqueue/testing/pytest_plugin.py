"""The pytest plugin (entry point ``pytest11``): django-workqueue's testing helpers as fixtures.

>>> def test_receipt(db, workqueue_drain, workqueue_assert_enqueued):
...     order = Order.objects.create()
...     workqueue_assert_enqueued(send_receipt, args=[order.pk])
...     workqueue_drain()

``workqueue_eager`` turns on ``WORKQUEUE["EAGER"]`` for one test. The fixtures need
pytest-django's database access (``db``, ``transactional_db`` or ``django_db``), as any test
that writes jobs does.

pytest loads this plugin in every session of an environment where django-workqueue is
installed, before Django is set up (and in projects that never use it): each fixture imports
what it hands out when a test asks for it, never this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def workqueue_drain() -> Callable[..., int]:
    """``django_workqueue.testing.drain``: run ready jobs in this thread until none is left."""
    from . import drain  # when asked: see the module's docstring

    return drain


@pytest.fixture
def workqueue_run_job() -> Callable[..., Any]:
    """``django_workqueue.testing.run_job``: run one attempt of a ready job here."""
    from . import run_job  # when asked: see the module's docstring

    return run_job


@pytest.fixture
def workqueue_assert_enqueued() -> Callable[..., Any]:
    """``django_workqueue.testing.assert_enqueued``."""
    from . import assert_enqueued  # when asked: see the module's docstring

    return assert_enqueued


@pytest.fixture
def workqueue_assert_not_enqueued() -> Callable[..., Any]:
    """``django_workqueue.testing.assert_not_enqueued``."""
    from . import assert_not_enqueued  # when asked: see the module's docstring

    return assert_not_enqueued


@pytest.fixture
def workqueue_eager() -> Iterator[None]:
    """``WORKQUEUE["EAGER"] = True`` for this test: jobs run here once their enqueue commits
    (in a test wrapped in a transaction, use ``transactional_db`` or
    ``django_capture_on_commit_callbacks(execute=True)``)."""
    # When asked: see the module's docstring.
    from django.conf import settings
    from django.test import override_settings

    with override_settings(WORKQUEUE={**getattr(settings, "WORKQUEUE", {}), "EAGER": True}):
        yield

"""A jobs database that is not ``default``: a second alias, ``jobs``, reaching the same test
database through its own connection, made ``WORKQUEUE["DATABASE"]``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connections
from django.db.utils import load_backend
from django.test import override_settings

from django_workqueue import db as drivers


@pytest.fixture
def jobs_alias(transactional_db: None) -> Iterator[str]:
    """A ``jobs`` connection to the test database, made the jobs database. It is this thread's
    connection only, not a ``DATABASES`` entry: the test case allows such a connection, where
    it would block an alias it was not given."""
    settings_dict = dict(connections["default"].settings_dict)
    connections["jobs"] = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(
        settings_dict, "jobs"
    )
    try:
        with override_settings(WORKQUEUE={**settings.WORKQUEUE, "DATABASE": "jobs"}):
            yield "jobs"
    finally:
        connections["jobs"].close()
        del connections["jobs"]
        drivers._drivers.pop("jobs", None)  # the driver made for the alias

"""The pytest plugin as a user meets it: a fresh project with its own settings, tasks and
tests, run by pytest in a subprocess; the fixtures come from the package's entry point."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
from pathlib import Path

import pytest

PLUGIN = "django_workqueue.testing.pytest_plugin"

SETTINGS = """
    SECRET_KEY = "sample"
    USE_TZ = True
    INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django_workqueue"]
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "sample.sqlite3",
                             "TEST": {"NAME": "test_sample.sqlite3"}}}
    WORKQUEUE = {"QUEUES": ["default"], "TASK_MODULES": ["shop_tasks"]}
"""

TASKS = """
    from django.contrib.auth.models import Group
    from django_workqueue import task

    @task
    def welcome(name):
        Group.objects.create(name=f"welcomed-{name}")
"""

TESTS = """
    from django.contrib.auth.models import Group
    from shop_tasks import welcome

    def test_drain(db, workqueue_drain, workqueue_assert_enqueued):
        welcome.enqueue("ada")
        workqueue_assert_enqueued(welcome, args=["ada"], count=1)
        assert workqueue_drain() == 1
        assert Group.objects.filter(name="welcomed-ada").exists()

    def test_eager(db, workqueue_eager, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=True):
            welcome.enqueue("bob")
        assert Group.objects.filter(name="welcomed-bob").exists()

    def test_not_enqueued(db, workqueue_assert_not_enqueued):
        workqueue_assert_not_enqueued(welcome)
"""


def _installed_with_entry_point() -> bool:
    # Only where an installed package is found: the checkout's own egg-info (made by
    # ``pip install -e``) is on the path here, not in the subprocess.
    here = Path(__file__).resolve().parents[2]
    paths = [p for p in sys.path if p and Path(p).resolve() != here]
    return any(
        entry.value == PLUGIN
        for dist in importlib.metadata.distributions(path=paths)
        for entry in dist.entry_points
        if entry.group == "pytest11"
    )


@pytest.mark.skipif(
    not _installed_with_entry_point(),
    reason="the package was installed before its pytest11 entry point existed (reinstall it)",
)
def test_a_users_suite_gets_the_fixtures_from_the_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        sample_settings=textwrap.dedent(SETTINGS),
        shop_tasks=textwrap.dedent(TASKS),
        test_shop=textwrap.dedent(TESTS),
    )
    pytester.makeini("[pytest]\npythonpath = .\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ds", "sample_settings")
    result.assert_outcomes(passed=3)

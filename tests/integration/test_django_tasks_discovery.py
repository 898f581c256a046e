"""Where a worker finds ``django.tasks`` tasks: each is registered as it is defined, a worker
knows those of the modules it imports at start-up (the apps' tasks modules, TASK_MODULES and
the URLconf), and the first enqueue of a task defined anywhere else names the task, its module
and the fix."""

from __future__ import annotations

import logging
import sys

import django
import pytest
from django.test import override_settings

from django_workqueue import discovery, django_tasks
from django_workqueue.models import Job
from django_workqueue.registry import find_task
from django_workqueue.testing import drain

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0+"),
]

URLCONF = "tests.support.urls_with_django_tasks"
VIEWS = "tests.support.django_task_views"


def _named_workers(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "django_workqueue" and "imported after start-up" in record.getMessage()
    ]


@pytest.fixture
def fresh_bridge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which tasks were named and which were defined late (other tests define them)."""
    monkeypatch.setattr(django_tasks, "_warned", set())
    monkeypatch.setattr(django_tasks, "_defined_late", dict(django_tasks._defined_late))
    monkeypatch.setattr(django_tasks, "_bridged", dict(django_tasks._bridged))


def test_a_task_defined_after_start_up_is_named_once_at_its_first_enqueue(
    caplog: pytest.LogCaptureFixture, fresh_bridge: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="django_workqueue")
    monkeypatch.delitem(sys.modules, "tests.support.django_tasks_late", raising=False)
    from tests.support.django_tasks_late import late_add  # a test's import: after start-up

    late_add.enqueue(1, 2)
    late_add.enqueue(3, 4)
    [message] = _named_workers(caplog)
    assert "tests.support.django_tasks_late.late_add is defined in tests.support." in message
    assert "add 'tests.support.django_tasks_late' to WORKQUEUE['TASK_MODULES']" in message
    assert "installed app's tasks.py" in message
    assert drain() == 2  # this process knows it: the warning is about workers


def test_a_task_the_urlconf_imports_is_known_to_a_worker_and_not_named(
    caplog: pytest.LogCaptureFixture, fresh_bridge: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="django_workqueue")
    for module in (URLCONF, VIEWS):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.delitem(django_tasks._bridged, f"{VIEWS}.greet", raising=False)
    with override_settings(ROOT_URLCONF=URLCONF):
        discovery.import_urlconf()  # what runworker does at start
        assert find_task(f"{VIEWS}.greet") is not None
        from tests.support.django_task_views import greet

        result = greet.enqueue("you")
    assert _named_workers(caplog) == []
    assert drain() == 1
    assert Job.objects.get(pk=int(result.id)).result == "hello you"


def test_a_urlconf_that_fails_to_import_is_reported_as_a_task_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "tests.support.no_such_urlconf"
    monkeypatch.delitem(discovery.import_errors, name, raising=False)
    with override_settings(ROOT_URLCONF=name):
        discovery.import_urlconf()
    assert discovery.import_errors.pop(name).startswith("ModuleNotFoundError")


def test_a_task_defined_at_start_up_is_not_named(
    caplog: pytest.LogCaptureFixture, fresh_bridge: None
) -> None:
    from django.apps import apps as registry

    caplog.set_level(logging.WARNING, logger="django_workqueue")
    from django.tasks import task

    def defined_in_ready() -> int:
        return 1

    defined_in_ready.__qualname__ = "defined_in_ready"  # as if at module level
    registry.ready = False  # as while Django sets the apps up (each app's ready())
    try:
        decorated = task(defined_in_ready)
    finally:
        registry.ready = True
    decorated.enqueue()
    assert _named_workers(caplog) == []

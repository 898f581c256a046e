"""Where the django.tasks backend may be imported, and how the pytest plugin is found."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import django
import pytest
from django.core.exceptions import ImproperlyConfigured

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(django.VERSION >= (6, 0), reason="the error is for Django < 6.0")
def test_importing_the_backend_before_django_6_names_the_version_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "django_workqueue.backend", raising=False)
    with pytest.raises(
        ImproperlyConfigured, match=r"this is Django 5\.2.*Upgrade to Django 6\.0 or later"
    ):
        importlib.import_module("django_workqueue.backend")


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0+")
def test_the_backend_is_a_django_task_backend() -> None:
    from django.tasks.backends.base import BaseTaskBackend

    from django_workqueue.backend import WorkqueueBackend

    assert issubclass(WorkqueueBackend, BaseTaskBackend)


def test_the_pytest_plugin_is_an_entry_point_of_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (plugin,) = project["project"]["entry-points"]["pytest11"].values()
    module = importlib.import_module(plugin)
    assert {"workqueue_drain", "workqueue_assert_enqueued", "workqueue_eager"} <= set(vars(module))

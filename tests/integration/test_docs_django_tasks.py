"""The Django tasks guide's settings examples are what the backend accepts."""

from __future__ import annotations

import re
from pathlib import Path

import django
import pytest

pytestmark = pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0+")

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "django-tasks.md"


def _tasks_settings() -> list[dict]:
    found = []
    for block in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL):
        if block.startswith("TASKS = {"):
            namespace: dict = {}
            exec(block, namespace)
            found.append(namespace["TASKS"])
    return found


def test_every_tasks_setting_in_the_guide_is_accepted() -> None:
    from django_workqueue.backend import TASK_OPTIONS, WorkqueueBackend

    settings = _tasks_settings()
    assert len(settings) >= 2
    for tasks in settings:
        backend = WorkqueueBackend("default", tasks["default"])
        assert backend.option_problems() == []
    # The guide lists every task option the backend takes.
    text = GUIDE.read_text()
    assert [name for name in TASK_OPTIONS if f"`{name}`" not in text] == []


def test_the_guide_shows_the_warning_a_task_unknown_to_workers_gets(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from types import SimpleNamespace

    from django_workqueue import django_tasks

    section = GUIDE.read_text().split("## Where tasks live", 1)[1].split("\n## ", 1)[0]
    [shown] = re.findall(r"```text\n(.*?)```", section, flags=re.DOTALL)
    monkeypatch.setattr(django_tasks, "_warned", set())
    monkeypatch.setattr(django_tasks, "_defined_late", {"shop.reports.build": "shop.reports"})
    with caplog.at_level("WARNING", logger="django_workqueue"):
        django_tasks.warn_if_unknown_to_workers(SimpleNamespace(module_path="shop.reports.build"))
    [record] = caplog.records
    assert " ".join(shown.split()) == record.getMessage()

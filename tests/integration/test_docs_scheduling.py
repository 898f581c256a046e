"""The cron section of the scheduling guide runs as written: its ``reports/tasks.py`` is
registered, its settings pass the system check, and its ``pycon`` sessions run as doctests, in
order and in one namespace."""

from __future__ import annotations

import doctest
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_workqueue import registry
from django_workqueue.checks import check_schedules
from tests.support.settings import workqueue_settings

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "scheduling.md"

pytestmark = pytest.mark.django_db


def section(name: str) -> str:
    text = GUIDE.read_text()
    start = text.index(f"<!-- section: {name} -->")
    return text[start : text.index(f"<!-- /section: {name} -->", start)]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section("cron"), flags=re.DOTALL)


@pytest.fixture
def reports_tasks() -> Iterator[dict[str, Any]]:
    """The guide's ``reports/tasks.py``, registered as the module ``reports.tasks``."""
    before = set(registry._registry)
    namespace: dict[str, Any] = {"__name__": "reports.tasks"}
    exec(blocks("python")[0], namespace)
    yield namespace
    for name in set(registry._registry) - before:
        del registry._registry[name]


def test_the_guides_tasks_register_with_their_schedule(reports_tasks):
    spec = reports_tasks["refresh_dashboard"].spec
    assert (spec.name, spec.cron, spec.cron_timezone) == (
        "reports.tasks.refresh_dashboard", "*/5 * * * *", "Europe/Paris",
    )  # fmt: skip


def test_the_guides_settings_pass_the_check(reports_tasks):
    namespace: dict[str, Any] = {}
    exec(blocks("python")[1], namespace)
    settings = namespace["WORKQUEUE"]
    with workqueue_settings(QUEUES=settings["QUEUES"], SCHEDULES=settings["SCHEDULES"]):
        assert check_schedules() == []


def test_the_guides_sessions_run_as_written(reports_tasks):
    sessions = blocks("pycon")
    assert len(sessions) == 3
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    globs: dict[str, Any] = {}
    for number, session in enumerate(sessions):
        test = parser.get_doctest(session, globs, f"scheduling.md cron #{number}", str(GUIDE), 0)
        runner.run(test, clear_globs=False)
        globs = test.globs  # a DocTest runs in a copy: the next session goes on from it
    assert runner.summarize(verbose=False).failed == 0

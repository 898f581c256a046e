"""The scheduling guide's section on pausing queues, holding jobs and cancelling by filter runs
as written: its ``pycon`` sessions are run as doctests, in order and in one namespace, against a
real worker serving the default and mail queues."""

from __future__ import annotations

import doctest
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_workqueue import registry

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "scheduling.md"
SECTION = "queues-and-holds"


def sessions() -> list[tuple[int, str]]:
    """The section's ```pycon blocks: (line of the block's first line, text)."""
    text = GUIDE.read_text()
    start = text.index(f"<!-- section: {SECTION} -->")
    end = text.index(f"<!-- /section: {SECTION} -->")
    return [
        (text.count("\n", 0, match.start(1)), match.group(1))
        for match in re.finditer(r"```pycon\n(.*?)```", text[:end], flags=re.DOTALL)
        if match.start() > start
    ]


@pytest.fixture
def saved_registry() -> Iterator[None]:
    saved = dict(registry._registry)
    yield
    registry._registry.clear()
    registry._registry.update(saved)


def test_the_queues_and_holds_section_runs_as_written(
    transactional_db: None, saved_registry: None, background_worker: Callable[..., Any]
) -> None:
    found = sessions()
    assert len(found) == 4, "the section's sessions were not found"
    background_worker(queues=["default", "mail"])
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    namespace: dict[str, Any] = {"__name__": "guide"}
    for line, text in found:
        session = parser.get_doctest(text, namespace, GUIDE.name, str(GUIDE), line)
        runner.run(session, out=report.append, clear_globs=False)
        namespace = session.globs
        assert not runner.failures, "".join(report)
    assert runner.tries >= 15

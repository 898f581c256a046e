"""The flow-control guide's section on batch tasks runs as written: its ``pycon`` session is
run as a doctest against a real worker serving the default queue."""

from __future__ import annotations

import doctest
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_workqueue import registry

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "flow-control.md"
SECTION = "batches"


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


def test_the_batches_section_runs_as_written(
    transactional_db: None, saved_registry: None, background_worker: Callable[..., Any]
) -> None:
    found = sessions()
    assert len(found) == 1, "the section's session was not found"
    background_worker(queues=["default"])
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    namespace: dict[str, Any] = {"__name__": "guide"}
    for line, text in found:
        session = parser.get_doctest(text, namespace, GUIDE.name, str(GUIDE), line)
        runner.run(session, out=report.append, clear_globs=False)
        assert not runner.failures, "".join(report)
    assert runner.tries >= 5

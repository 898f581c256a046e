"""The flow-control guide's sections on slots, autoscaling and backpressure run as written: the
``pycon`` sessions of each section run as doctests, in order and in one namespace, against the
worker the section describes (SQLite and PostgreSQL)."""

from __future__ import annotations

import doctest
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "flow-control.md"

pytestmark = pytest.mark.django_db(transaction=True)


def sessions(section: str) -> list[tuple[int, str]]:
    """The section's ```pycon blocks: (line of the block's first line, text)."""
    text = GUIDE.read_text()
    start = text.index(f"<!-- section: {section} -->")
    end = text.index(f"<!-- /section: {section} -->")
    return [
        (text.count("\n", 0, match.start(1)), match.group(1))
        for match in re.finditer(r"```pycon\n(.*?)```", text[:end], flags=re.DOTALL)
        if match.start() > start
    ]


def run_sessions(section: str, expected_examples: int) -> None:
    found = sessions(section)
    assert found, f"the {section} section's sessions were not found"
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    namespace: dict[str, Any] = {"__name__": "guide"}
    for line, text in found:
        session = parser.get_doctest(text, namespace, GUIDE.name, str(GUIDE), line)
        runner.run(session, out=report.append, clear_globs=False)
        namespace = session.globs
        assert not runner.failures, "".join(report)
    assert runner.tries == expected_examples


def test_the_slots_section_runs_as_written(background_worker: Callable[..., Any]) -> None:
    background_worker(queue_slots={"default": 8, "mail": 2})

    run_sessions("slots", expected_examples=2)


def test_the_autoscaling_section_runs_as_written(background_worker: Callable[..., Any]) -> None:
    background_worker(concurrency=2, max_concurrency=8)

    run_sessions("autoscaling", expected_examples=6)


def test_the_backpressure_section_runs_as_written() -> None:
    run_sessions("backpressure", expected_examples=6)

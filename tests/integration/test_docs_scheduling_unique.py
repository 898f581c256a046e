"""The scheduling guide's unique-jobs section runs as written: its ``python`` block is run as a
module of tasks, and its ``pycon`` sessions as doctests, in order and in one namespace."""

from __future__ import annotations

import doctest
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_workqueue import registry

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "scheduling.md"
MODULE = "docs_scheduling_unique"

pytestmark = pytest.mark.django_db(transaction=True)


def section(name: str) -> str:
    text = GUIDE.read_text()
    match = re.search(rf"<!-- section: {name} -->(.*?)<!-- /section: {name} -->", text, re.S)
    assert match, f"no section {name} in {GUIDE}"
    return match.group(1)


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


@pytest.fixture
def guide_tasks() -> Iterator[types.ModuleType]:
    module = types.ModuleType(MODULE)
    sys.modules[MODULE] = module
    before = set(registry._registry)
    try:
        [source] = blocks(section("unique"), "python")
        exec(compile(source, str(GUIDE), "exec"), module.__dict__)
        yield module
    finally:
        for name in set(registry._registry) - before:
            del registry._registry[name]
        del sys.modules[MODULE]


def test_the_unique_jobs_section_runs_as_written(guide_tasks):
    sessions = blocks(section("unique"), "pycon")
    assert len(sessions) >= 5
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    globs = dict(guide_tasks.__dict__)
    test = parser.get_doctest("\n".join(sessions), globs, "scheduling.md#unique", str(GUIDE), 0)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0

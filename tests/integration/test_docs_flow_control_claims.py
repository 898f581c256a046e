"""The flow-control guide's sections on idempotency claims and skip-queue run as written: each
section's tasks module is imported as an app of its own, and its ``pycon`` sessions are run as
doctests, in order and in one namespace (claims with a worker running, skip-queue without)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from django_workqueue import registry
from tests.support.guides import Guide

GUIDE = Guide("flow-control")

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def guide_app(tmp_path: Path) -> Iterator[Callable[[str, str], ModuleType]]:
    """Import a section's ``# <app>/tasks.py`` block as ``<app>.tasks``; undone at teardown."""
    saved = dict(registry._registry)
    sys.path.insert(0, str(tmp_path))
    apps: list[str] = []

    def load(name: str, app: str) -> ModuleType:
        [(_, tasks)] = [b for b in GUIDE.blocks(name, "python") if f"# {app}/tasks.py" in b[1]]
        package = tmp_path / app
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "tasks.py").write_text(tasks)
        apps.append(app)
        return importlib.import_module(f"{app}.tasks")

    yield load
    sys.path.remove(str(tmp_path))
    for module in [m for m in sys.modules if m.split(".")[0] in apps]:
        del sys.modules[module]
    registry._registry.clear()
    registry._registry.update(saved)


def run_sessions(name: str, minimum: int) -> None:
    assert len(GUIDE.blocks(name, "pycon")) >= minimum
    assert GUIDE.run_sessions(name) >= 2 * minimum


def test_the_claims_section_runs_as_written(
    guide_app: Callable[[str, str], ModuleType], background_worker: Callable[..., Any]
) -> None:
    guide_app("claims", "billing")
    background_worker(concurrency=2)
    run_sessions("claims", minimum=4)


def test_the_skip_queue_section_runs_as_written(
    guide_app: Callable[[str, str], ModuleType],
) -> None:
    guide_app("skip-queue", "signup")
    run_sessions("skip-queue", minimum=3)

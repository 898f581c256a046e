"""The workflows guide runs as written: its ``shop/tasks.py`` is imported as a ``shop`` app over a
stand-in ``Invoice`` model, and its ``pycon`` sessions are run as doctests, in order and in one
namespace, against a real worker."""

from __future__ import annotations

import doctest
import importlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.db import connection, models

from django_workqueue import registry

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "workflows.md"


class Invoice(models.Model):
    """The field of ``shop.models.Invoice`` the guide's tasks use. Its table exists only during
    this test (the ``shop`` fixture); no migration creates it."""

    order_id = models.IntegerField()

    class Meta:
        app_label = "testapp"
        db_table = "docs_workflows_invoice"

    def __str__(self) -> str:
        return f"invoice {self.pk} of order {self.order_id}"


def blocks(language: str) -> list[tuple[int, str]]:
    """The guide's ```<language> blocks: (line of the block's first line, text)."""
    text = GUIDE.read_text()
    return [
        (text.count("\n", 0, match.start(1)), match.group(1))
        for match in re.finditer(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)
    ]


@pytest.fixture
def shop(transactional_db: None, tmp_path: Path) -> Iterator[ModuleType]:
    """``shop.tasks`` from the guide, importable, with its table and registry cleaned up."""
    with connection.schema_editor() as editor:
        editor.create_model(Invoice)
    package = tmp_path / "shop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(f"from {__name__} import Invoice  # noqa: F401\n")
    [(_, tasks)] = [block for block in blocks("python") if "# shop/tasks.py" in block[1]]
    (package / "tasks.py").write_text(tasks)
    saved = dict(registry._registry)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("shop.tasks")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "shop" or m.startswith("shop.")]:
            del sys.modules[name]
        registry._registry.clear()
        registry._registry.update(saved)
        with connection.schema_editor() as editor:
            editor.delete_model(Invoice)


def test_the_workflows_guide_runs_as_written(
    shop: ModuleType, background_worker: Callable[..., Any]
) -> None:
    sessions = blocks("pycon")
    assert len(sessions) > 15, "the guide's sessions were not found"
    background_worker(concurrency=4)
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    namespace: dict[str, Any] = {"__name__": "guide"}
    for line, text in sessions:
        session = parser.get_doctest(text, namespace, GUIDE.name, str(GUIDE), line)
        runner.run(session, out=report.append, clear_globs=False)
        namespace = session.globs  # a DocTest runs in a copy: the next session goes on from it
        # A failed session leaves later ones without the names it should have made.
        assert not runner.failures, "".join(report)
    assert runner.tries > 60

"""Run a guide's examples as written: its sections (between ``<!-- section: NAME -->`` markers),
their code blocks, and their ``pycon`` sessions as doctests in one namespace, in order."""

from __future__ import annotations

import doctest
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django_workqueue import registry

DOCS = Path(__file__).resolve().parents[2] / "docs"


class Guide:
    def __init__(self, name: str) -> None:
        self.path = DOCS / "guides" / f"{name}.md"

    def section(self, name: str) -> tuple[int, str]:
        """The text between the section's markers, and the line it starts on."""
        text = self.path.read_text()
        match = re.search(rf"<!-- section: {name} -->\n(.*?)<!-- /section: {name} -->", text, re.S)
        assert match is not None, f"section {name} not found in {self.path}"
        return text.count("\n", 0, match.start(1)), match.group(1)

    def blocks(self, name: str, language: str) -> list[tuple[int, str]]:
        """The section's ```language blocks: (line of the block's first line, text)."""
        start, text = self.section(name)
        return [
            (start + text.count("\n", 0, match.start(1)), match.group(1))
            for match in re.finditer(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)
        ]

    def run_sessions(self, name: str, namespace: dict[str, Any] | None = None) -> int:
        """Run the section's sessions in one namespace (the next goes on from the last);
        fail with the doctest report at the first failure; return how many examples ran."""
        sessions = self.blocks(name, "pycon")
        assert sessions, f"the sessions of section {name} were not found"
        parser = doctest.DocTestParser()
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        report: list[str] = []
        globs: dict[str, Any] = {"__name__": "guide", **(namespace or {})}
        for line, text in sessions:
            session = parser.get_doctest(text, globs, self.path.name, str(self.path), line)
            runner.run(session, out=report.append, clear_globs=False)
            globs = session.globs  # a DocTest runs in a copy: the next session goes on from it
            assert not runner.failures, "".join(report)
        return runner.tries


@contextmanager
def registry_restored() -> Iterator[None]:
    """Tasks a guide's example registers are forgotten afterwards."""
    saved = dict(registry._registry)
    try:
        yield
    finally:
        registry._registry.clear()
        registry._registry.update(saved)

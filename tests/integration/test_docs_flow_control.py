"""The flow control guide runs as written: each section's ``tasks.py`` registers under the
module it names, and its ``pycon`` sessions run as doctests in that module's namespace."""

from __future__ import annotations

import doctest
import re
from collections.abc import Iterator
from typing import Any

import pytest

from django_workqueue import registry
from tests.support.guides import Guide

GUIDE = Guide("flow-control")

pytestmark = pytest.mark.django_db


def blocks(name: str, language: str) -> list[str]:
    return [text for _, text in GUIDE.blocks(name, language)]


@pytest.fixture
def registered() -> Iterator[None]:
    before = set(registry._registry)
    yield
    for name in set(registry._registry) - before:
        del registry._registry[name]


def run_section(name: str) -> tuple[dict[str, Any], int]:
    """Exec the section's python blocks (each as the module its first comment names) and its
    sessions in one namespace; return the namespace and how many examples failed."""
    namespace: dict[str, Any] = {}
    for code in blocks(name, "python"):
        module = re.match(r"# (\w+)/(\w+)\.py", code)
        assert module, f"section {name}: a python block must start with '# app/tasks.py'"
        namespace["__name__"] = f"{module[1]}.{module[2]}"
        exec(code, namespace)
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for number, session in enumerate(blocks(name, "pycon")):
        test = parser.get_doctest(session, namespace, f"flow-control.md {name} #{number}", "", 0)
        runner.run(test, clear_globs=False)
        namespace = test.globs
    return namespace, runner.summarize(verbose=False).failed


@pytest.mark.parametrize("name", ["limits", "rates", "fairness"])
def test_the_sections_run_as_written(registered, name):
    _namespace, failed = run_section(name)
    assert failed == 0
    assert blocks(name, "python")


def test_the_limits_sections_tasks_carry_their_limits(registered):
    namespace, _ = run_section("limits")
    spec = namespace["sync_customer"].spec
    assert (spec.concurrency, spec.limit_key(7)) == (1, "customer:7")


def test_the_rates_sections_tasks_carry_their_rates(registered):
    namespace, _ = run_section("rates")
    assert str(namespace["call_partner"].spec.rate) == "10/1s"
    assert str(namespace["geocode"].spec.rate) == "100/60s"

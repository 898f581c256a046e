"""The observability guide runs as written: each section's ``app/module.py`` blocks become that
module (importable, so settings can name them), its ``pycon`` sessions run as doctests, and
its settings blocks are the settings the examples run with."""

from __future__ import annotations

import doctest
import logging
import re
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from django_workqueue import registry, signals, task
from django_workqueue.worker.runner import Worker
from tests.support.guides import Guide
from tests.support.settings import workqueue_settings

GUIDE = Guide("observability")

pytestmark = pytest.mark.django_db(transaction=True)


def blocks(name: str, language: str) -> list[str]:
    return [text for _, text in GUIDE.blocks(name, language)]


@pytest.fixture
def modules() -> Iterator[dict[str, Any]]:
    """Exec'd blocks by module name, installed in ``sys.modules``; removed afterwards with the
    tasks they registered and the receivers they connected."""
    tasks_before = set(registry._registry)
    made: dict[str, Any] = {}
    yield made
    for name in set(registry._registry) - tasks_before:
        del registry._registry[name]
    for name in made:
        sys.modules.pop(name, None)
    for namespace in made.values():
        for value in vars(namespace).values():
            for signal_name in signals.__all__:
                getattr(signals, signal_name).disconnect(value)


def load(name: str, made: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Exec the section's module blocks (one shared namespace, as the pycon sessions see it)
    and its settings blocks; return (namespace, settings)."""
    namespace: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for code in blocks(name, "python"):
        if code.startswith("# settings.py"):
            exec(code, settings)
            continue
        module = re.match(r"# (\w+)/(\w+)\.py", code)
        assert module, f"section {name}: a python block must start with '# app/module.py'"
        dotted = f"{module[1]}.{module[2]}"
        sys.modules.setdefault(module[1], types.ModuleType(module[1]))
        made.setdefault(module[1], sys.modules[module[1]])
        as_module = types.ModuleType(dotted)
        as_module.__dict__["__name__"] = dotted
        exec(code, as_module.__dict__)
        sys.modules[dotted] = made[dotted] = as_module
        namespace.update({k: v for k, v in as_module.__dict__.items() if not k.startswith("__")})
    return namespace, settings


def run_sessions(name: str, namespace: dict[str, Any]) -> int:
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for number, session in enumerate(blocks(name, "pycon")):
        test = parser.get_doctest(session, namespace, f"observability.md {name} #{number}", "", 0)
        runner.run(test, clear_globs=False)
    return runner.summarize(verbose=False).failed


def test_the_signals_section_runs_as_written(modules, caplog):
    namespace, _ = load("signals", modules)
    assert run_sessions("signals", namespace) == 0
    assert namespace["succeeded"] == [("shop.tasks.add", 1)]

    # The dead-letter receiver logs the job's last error.
    from django_workqueue.operations import fail_job

    job = namespace["add"].enqueue(1, 1)
    with caplog.at_level(logging.ERROR, logger="shop.jobs"):
        fail_job(job, "rejected")
    assert [r.getMessage() for r in caplog.records if r.name == "shop.jobs"] == [
        f"job {job.pk} (shop.tasks.add) is dead-lettered: rejected"
    ]


def test_the_middleware_sections_settings_run_its_middleware_and_format_its_records(
    modules, capsys
):
    namespace, settings = load("middleware", modules)

    @task(name="shop.tasks.logs")
    def logs() -> None:
        logging.getLogger("shop.jobs").warning("charging")

    formatter = logging.Formatter(settings["LOGGING"]["formatters"]["jobs"]["format"])
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("shop.jobs").addHandler(handler)
    try:
        with workqueue_settings(**settings["WORKQUEUE"]):
            job = logs.enqueue()
            Worker(burst=True).run()
    finally:
        logging.getLogger("shop.jobs").removeHandler(handler)

    assert [(task, attempt) for task, attempt, _ in namespace["timings"]] == [
        ("shop.tasks.logs", 1)
    ]
    assert [formatter.format(r) for r in records] == [
        f"WARNING shop.jobs [job {job.pk} shop.tasks.logs #1] charging"
    ]

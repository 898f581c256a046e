"""The flow-controlled tasks of ``testproject.testapp.flow_tasks``, registered only while a
test uses them: a worker made while they are registered runs the flow claim next to the plain
one, and the other tests' workers should not."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django_workqueue import Task, registry
from testproject.testapp import flow_tasks as module

TASKS = {value.name: value for value in vars(module).values() if isinstance(value, Task)}
for _name in TASKS:  # importing the module registered them
    registry._registry.pop(_name, None)


@contextmanager
def flow_tasks() -> Iterator[None]:
    registry._registry.update(TASKS)
    try:
        yield
    finally:
        for name in TASKS:
            registry._registry.pop(name, None)

"""Compositions of work: signatures, chains and groups, and how they become a graph of jobs.

``task.s(*args, **kwargs)`` is a *signature*: a call not made yet. ``chain(a, b, c)`` runs its
steps one after the other, each receiving the previous step's value as its first argument;
``group(a, b)`` runs its members side by side, and its value is the list of its members' values
in declared order; ``x.then(y)`` is ``chain(x, y)`` (a group followed by a callback is a chord).
They nest freely.

``graph.py`` compiles a composition into ``Node``s, validating every step (queue, priority, options,
arguments against the function's parameters) before anything is written: a workflow that
cannot be written raises and writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from ..exceptions import InvalidOption
from ..payload import describe

if TYPE_CHECKING:
    from ..decorator import Task
    from ..models import Workflow

# A value's shape: a node index (its job's result), or a list of shapes (a group's results).
Shape = int | list[Any]


class Signature:
    """A task with its arguments, to be run as a step of a workflow: ``task.s(...)``.

    >>> chain(fetch.s(url), parse.s(), store.s()).enqueue()
    """

    __slots__ = ("args", "kwargs", "task")

    def __init__(self, task: Task[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        self.task = task
        self.args = args
        self.kwargs = kwargs

    def then(self, *steps: Step) -> Chain:
        """This step, then ``steps`` (each receiving the previous one's value)."""
        return Chain(self, *steps)

    def __repr__(self) -> str:
        parts = [describe(a, 30) for a in self.args]
        parts += [f"{k}={describe(v, 30)}" for k, v in self.kwargs.items()]
        return f"{self.task.name}.s({', '.join(parts)})"


class Composition:
    """What ``chain`` and ``group`` build: it can be followed (``then``) and enqueued."""

    steps: tuple[Step, ...]

    in_sequence: bool
    """Whether the steps run one after the other (a chain) or side by side (a group)."""

    def then(self, *steps: Step) -> Chain:
        """This composition, then ``steps``: ``group(...).then(callback.s())`` is a chord, the
        callback receiving the list of the group's results."""
        return Chain(self, *steps)

    def enqueue(self, *, name: str = "") -> Workflow:
        """Write the whole workflow (its jobs, their dependencies, its counters) in one
        transaction, joining the caller's: it exists if and only if that transaction commits.

        >>> wf = group(a.s(), b.s()).enqueue(); wf.wait(timeout=60); wf.result
        """
        # Imported here: this module is imported with the package, before Django's app
        # registry is ready, and the store imports the models.
        from .store import write_workflow

        return write_workflow(self, name=name or self.describe())

    async def aenqueue(self, *, name: str = "") -> Workflow:
        """``enqueue`` for async code, run as ``Task.aenqueue`` runs ``Task.enqueue``.

        >>> wf = await chain(fetch.s(url), parse.s()).aenqueue()
        """
        return await sync_to_async(self.enqueue, thread_sensitive=True)(name=name)

    def describe(self) -> str:
        raise NotImplementedError


class Chain(Composition):
    """Steps run one after the other; each receives the previous step's value first."""

    in_sequence = True

    def __init__(self, *steps: Step) -> None:
        self.steps = _steps("chain", steps)
        if not self.steps:
            raise InvalidOption("chain() needs at least one step")

    def describe(self) -> str:
        return "chain(" + ", ".join(_name(step) for step in self.steps) + ")"


class Group(Composition):
    in_sequence = False
    """Members run side by side; the group's value is the list of their values, in order."""

    def __init__(self, *members: Step | Iterable[Step]) -> None:
        if len(members) == 1 and not isinstance(members[0], Signature | Composition):
            members = tuple(members[0])  # group(x.s(i) for i in ids)
        self.steps = _steps("group", members)

    def describe(self) -> str:
        return "group(" + ", ".join(_name(step) for step in self.steps) + ")"


Step = Signature | Composition


def chain(*steps: Step) -> Chain:
    """Run ``steps`` one after the other, each receiving the previous step's result first.

    >>> chain(fetch.s(url), parse.s(), store.s()).enqueue()
    """
    return Chain(*steps)


def group(*members: Step | Iterable[Step]) -> Group:
    """Run ``members`` side by side; the value is the list of their results, in order.

    >>> group(resize.s(i) for i in ids).then(build_album.s(album_id)).enqueue()
    """
    return Group(*members)


def _steps(kind: str, steps: Iterable[Any]) -> tuple[Step, ...]:
    steps = tuple(steps)
    for index, step in enumerate(steps):
        if not isinstance(step, Signature | Composition):
            hint = " (call task.s(...) to make one)" if hasattr(step, "spec") else ""
            raise InvalidOption(
                f"{kind}() step {index} is {describe(step)}, not a signature, chain or group{hint}"
            )
    return steps


def _name(step: Step) -> str:
    return step.task.name.rpartition(".")[2] if isinstance(step, Signature) else step.describe()

"""Compositions of work: signatures, chains and groups, and how they become a graph of jobs.

``task.s(*args, **kwargs)`` is a *signature*: a call not made yet. ``chain(a, b, c)`` runs its
steps one after the other, each receiving the previous step's value as its first argument;
``group(a, b)`` runs its members side by side, and its value is the list of its members' values
in declared order; ``x.then(y)`` is ``chain(x, y)`` (a group followed by a callback is a chord).
They nest freely.

``compile`` turns a composition into ``Node``s, validating every step (queue, priority, options,
arguments against the function's parameters) before anything is written: a workflow that
cannot be written raises and writes nothing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidOption
from ..flow.keys import check_batch_item, flow_key, is_flow_task
from ..payload import describe
from ..states import RunCondition

if TYPE_CHECKING:
    from ..db import NewJob
    from ..decorator import Task
    from ..enqueue import Call
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

    def then(self, *steps: Step) -> Chain:
        """This composition, then ``steps``: ``group(...).then(callback.s())`` is a chord, the
        callback receiving the list of the group's results."""
        return Chain(self, *steps)

    def enqueue(self, *, name: str = "") -> Workflow:
        """Write the whole workflow (its jobs, their dependencies, its counters) in one
        transaction, joining the caller's: it exists if and only if that transaction commits.

        >>> wf = group(a.s(), b.s()).enqueue(); wf.wait(timeout=60); wf.result
        """
        from .store import write_workflow

        return write_workflow(self, name=name or self.describe())

    async def aenqueue(self, *, name: str = "") -> Workflow:
        """``enqueue`` for async code, run as ``Task.aenqueue`` runs ``Task.enqueue``.

        >>> wf = await chain(fetch.s(url), parse.s()).aenqueue()
        """
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue, thread_sensitive=True)(name=name)

    def describe(self) -> str:
        raise NotImplementedError


class Chain(Composition):
    """Steps run one after the other; each receives the previous step's value first."""

    def __init__(self, *steps: Step) -> None:
        self.steps = _steps("chain", steps)
        if not self.steps:
            raise InvalidOption("chain() needs at least one step")

    def describe(self) -> str:
        return "chain(" + ", ".join(_name(step) for step in self.steps) + ")"


class Group(Composition):
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


class _PreviousResult:
    """Stands for a prerequisite's result while a step's arguments are checked."""

    def __repr__(self) -> str:
        return "<previous result>"


_PREVIOUS = _PreviousResult()


@dataclasses.dataclass(slots=True, kw_only=True)
class Node:
    """One job of a compiled workflow, validated, ready to be written."""

    template: NewJob
    call: Call
    prerequisites: list[int]
    """Node indexes this job waits for, in declared order (its first dependency positions)."""
    external: list[int]
    """Ids of existing jobs it waits for (``using(depends_on=...)``), after those."""
    input_shape: Any
    """Positions of its prerequisites whose results make its first argument, or None."""


@dataclasses.dataclass(slots=True)
class Graph:
    nodes: list[Node] = dataclasses.field(default_factory=list)

    def add(
        self, step: Step, after: list[int], value: Shape | None, where: str
    ) -> tuple[list[int], Shape | None]:
        """Compile ``step`` to run after nodes ``after`` and receive ``value`` (None: receives
        nothing); return (its last nodes, its value's shape)."""
        if isinstance(step, Signature):
            return self._signature(step, after, value, where)
        if isinstance(step, Chain):
            for index, part in enumerate(step.steps):
                after, value = self.add(part, after, value, f"{where}, step {index}")
            return after, value
        sinks: list[int] = []
        values: list[Any] = []
        for index, member in enumerate(step.steps):
            member_sinks, member_value = self.add(member, after, value, f"{where}, member {index}")
            sinks += member_sinks
            values.append(member_value)
        return sinks, values

    def _signature(
        self, step: Signature, after: list[int], value: Shape | None, where: str
    ) -> tuple[list[int], Shape | None]:
        from ..enqueue import encode_call, job_template

        task, options = step.task, step.task.options
        owner = f"{where} ({task.name})"
        if options.skip_queue and options.depends_on is None:
            raise InvalidOption(
                f"{owner}: skip_queue cannot run a workflow's step: the workers run it once "
                f"its prerequisites end; leave skip_queue out"
            )
        template = job_template(task)
        if (
            template.unique_key is not None
            or template.unique_for is not None
            or task.spec.unique_on is not None
        ):
            raise InvalidOption(
                f"{owner}: unique jobs (unique_key, unique_on, unique_for) are not supported "
                f"for a workflow's steps; enqueue the "
                f"unique job alone and name it in depends_on"
            )
        call = encode_call(step.args, step.kwargs, owner)
        if value is None:
            task.spec.check_arguments(call.args, call.kwargs)
        else:  # the worker passes the previous value first
            task.spec.check_arguments([_PREVIOUS, *call.args], call.kwargs)
        flows = None
        if is_flow_task(task.spec):
            flows = (_step_flow_key(task, call, value is not None, owner),)
        external = _job_ids(owner, options.depends_on)
        position = {node: index for index, node in enumerate(after)}
        shape = None if value is None else _positions(value, position)
        node = Node(
            template=dataclasses.replace(
                template,
                waiting_on=len(after) + len(external),
                run_condition=_run_condition(owner, options.run_if),
                input_shape=None if shape is None else json.dumps(shape),
                flow_keys=flows,
            ),
            call=call,
            prerequisites=list(after),
            external=external,
            input_shape=shape,
        )
        self.nodes.append(node)
        index = len(self.nodes) - 1
        return [index], index


def _step_flow_key(task: Task[..., Any], call: Call, receives: bool, owner: str) -> str | None:
    """A step's flow key, from its declared arguments; a key function cannot see a value the
    step receives from its prerequisites, which exists only when they have run."""
    spec = task.spec
    if receives and (spec.limit_key is not None or spec.fair_key is not None):
        raise InvalidOption(
            f"{owner}: limit_key and fair_key are computed at enqueue from the job's arguments, "
            f"and this step receives its first argument from earlier steps; pass the key's "
            f"value as an argument of its own, or enqueue the step with .using(depends_on=...)"
        )
    if spec.batch_size is not None:
        if receives and (call.args or call.kwargs):
            raise InvalidOption(
                f"{owner}: a batch step's item is the value it receives; give it no arguments"
            )
        if not receives:
            check_batch_item(spec, call, owner)
    return flow_key(spec, call.args, call.kwargs, owner)


def _positions(shape: Shape, position: dict[int, int]) -> Any:
    if isinstance(shape, list):
        return [_positions(part, position) for part in shape]
    return position[shape]


def _job_ids(owner: str, depends_on: Any) -> list[int]:
    """The ids of ``depends_on``: jobs or job ids."""
    from ..models import Job

    if depends_on is None:
        return []
    if isinstance(depends_on, Job | int) or not isinstance(depends_on, Iterable):
        depends_on = [depends_on]
    ids: list[int] = []
    for item in depends_on:
        pk = item.pk if isinstance(item, Job) else item
        if isinstance(pk, bool) or not isinstance(pk, int):
            raise InvalidOption(
                f"{owner}: depends_on must list jobs or job ids, got {describe(item)}"
                + (" (a job not saved yet)" if isinstance(item, Job) else "")
            )
        if pk not in ids:
            ids.append(pk)
    return ids


def _run_condition(owner: str, run_if: Any) -> str:
    if run_if is None:
        return RunCondition.ALL_SUCCEEDED.value
    try:
        return RunCondition(run_if).value
    except ValueError:
        raise InvalidOption(
            f"{owner}: run_if must be one of {', '.join(repr(c.value) for c in RunCondition)}, "
            f"got {describe(run_if)}"
        ) from None


def output_ids(shape: Any, ids: list[int]) -> Any:
    """A value shape over node indexes, as the same shape over job ids."""
    if isinstance(shape, list):
        return [output_ids(part, ids) for part in shape]
    return ids[shape]

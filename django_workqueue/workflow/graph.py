"""Compiling a composition of ``canvas.py`` into a graph of ``Node``s: one validated job each
(queue, priority, options, arguments against the function's parameters), before anything is
written; ``store.py`` writes them.

Steps are told apart by their shape, so this module does not import the canvas that sits
above it: a signature has a ``task`` (with ``args`` and ``kwargs``), a composition has
``steps`` run ``in_sequence`` (a chain) or side by side (a group).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..enqueue import Call, encode_call, job_template
from ..exceptions import InvalidOption
from ..flow.keys import check_batch_item, flow_key, is_flow_task
from ..models import Job
from ..payload import describe
from ..states import RunCondition

if TYPE_CHECKING:
    from ..db import NewJob
    from ..decorator import Task
    from .canvas import Composition, Signature, Step

# A value's shape: a node index (its job's result), or a list of shapes (a group's results).
Shape = int | list[Any]


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
        if not hasattr(step, "steps"):  # a signature
            signature = cast("Signature", step)
            task, args, kwargs = signature.task, signature.args, signature.kwargs
            return self.add_call(task, args, kwargs, after, value, where)
        step = cast("Composition", step)
        if step.in_sequence:  # a chain
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

    def add_call(
        self,
        task: Task[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        after: list[int],
        value: Shape | None,
        where: str,
    ) -> tuple[list[int], Shape | None]:
        """Compile one call of ``task`` (a signature, or a job enqueued with ``depends_on``)."""
        options = task.options
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
        call = encode_call(args, kwargs, owner)
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

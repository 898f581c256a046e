"""Which flow group a job is claimed in: ``Job.flow_key``, computed at enqueue.

Jobs outside flow control have none and go through the plain claim. The others are grouped by
their key in a separate index, and claimed by ``flow.claim``, which walks from key to key:

* ``limit:<task>`` or ``limit:<task>:<limit_key(...)>`` — a task with ``concurrency=`` or
  ``rate=``: the key its limits count per (the ``FlowLimit`` row of the same name);
* ``fair:<fair_key(...)>`` — a tenant: claims rotate between tenants, whatever their tasks;
* ``batch:<task>`` — a batch task's jobs, claimed together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidOption
from ..payload import describe

if TYPE_CHECKING:
    from ..registry import TaskSpec

LIMIT, FAIR, BATCH = "limit:", "fair:", "batch:"
_MAX_KEY = 255


def is_flow_task(spec: TaskSpec) -> bool:
    """Whether the task's jobs are claimed under flow control."""
    return (
        spec.concurrency is not None
        or spec.rate is not None
        or spec.fair_key is not None
        or spec.batch_size is not None
    )


def flow_key(
    spec: TaskSpec, args: Sequence[Any], kwargs: Mapping[str, Any], owner: str
) -> str | None:
    """The job's ``flow_key``, or None for a task outside flow control."""
    if spec.batch_size is not None:
        return _bounded(f"{BATCH}{spec.name}")
    if spec.fair_key is not None:
        return _bounded(FAIR + _call(spec, spec.fair_key, "fair_key", args, kwargs, owner))
    if spec.concurrency is None and spec.rate is None:
        return None
    if spec.limit_key is None:
        return _bounded(f"{LIMIT}{spec.name}")
    return _bounded(
        f"{LIMIT}{spec.name}:" + _call(spec, spec.limit_key, "limit_key", args, kwargs, owner)
    )


def check_batch_item(spec: TaskSpec, call: Any, owner: str) -> None:
    """A batch task's job carries one item: one positional argument, no keywords."""
    if spec.batch_size is not None and (len(call.args) != 1 or call.kwargs):
        raise InvalidOption(
            f"{owner}: a batch task's job is one item: enqueue it with one positional "
            f"argument (the function receives the list of items), e.g. {spec.name}.enqueue(item)"
        )


def _call(
    spec: TaskSpec,
    function: Any,
    option: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    owner: str,
) -> str:
    """Call a key function with the job's arguments by name (defaults filled in), so that
    ``lambda customer_id, **kw: ...`` finds ``customer_id`` however the call passed it."""
    bound = spec.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = spec.signature.parameters[name].kind
        if kind is kind.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    try:
        value = function(**named)
    except Exception as exc:
        raise InvalidOption(
            f"{owner}: {option} raised {type(exc).__name__}: {exc}; it is called with the "
            f"job's arguments by name ({', '.join(named) or 'none'}) and must return a string"
        ) from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise InvalidOption(
            f"{owner}: {option} returned {describe(value)}; it must return a non-empty string"
        )
    return value


def _bounded(key: str) -> str:
    # Same value, same digest: a long key still names one group.
    if len(key) <= _MAX_KEY:
        return key
    return f"{key[:180]}#{hashlib.sha256(key.encode()).hexdigest()}"

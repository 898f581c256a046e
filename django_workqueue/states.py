"""The job state machine: the statuses and the one table of allowed transitions.

Every transition is carried out as one guarded ``UPDATE … WHERE status = <from>`` whose row count
says whether it happened; code that performs a transition names it through ``transition()`` so that
an edge missing from this table fails loudly in tests instead of writing an illegal state.
"""

from __future__ import annotations

from django.db import models


class Status(models.TextChoices):
    BLOCKED = "blocked", "Blocked"
    READY = "ready", "Ready"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.BLOCKED: frozenset({Status.READY, Status.CANCELLED}),
    Status.READY: frozenset({Status.RUNNING, Status.CANCELLED}),
    # running -> ready: retry, snooze, reaped lease, graceful-shutdown release.
    Status.RUNNING: frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.READY}),
    Status.SUCCEEDED: frozenset(),
    # failed is the dead-letter queue; redrive moves a job back to ready.
    Status.FAILED: frozenset({Status.READY}),
    Status.CANCELLED: frozenset(),
}

TERMINAL: frozenset[Status] = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLED})
ACTIVE: frozenset[Status] = frozenset({Status.BLOCKED, Status.READY, Status.RUNNING})


class IllegalTransition(RuntimeError):
    """Raised when code asks for a transition that the table above does not allow."""


def transition(source: Status, *targets: Status) -> tuple[Status, ...]:
    """Check that ``source -> target`` is allowed for every target and return the targets."""
    for target in targets:
        if target not in TRANSITIONS[source]:
            raise IllegalTransition(f"{source} -> {target} is not an allowed job transition")
    return targets


def can_transition(source: str, target: str) -> bool:
    return Status(target) in TRANSITIONS[Status(source)]

"""The job state machine: the statuses and the one table of allowed transitions.

Every transition is carried out as one guarded ``UPDATE … WHERE status = <from>`` whose row count
says whether it happened; code that performs a transition names it through ``transition()`` so that
an edge missing from this table fails loudly in tests instead of writing an illegal state.
"""

from __future__ import annotations

from django.db import models


class Status(models.TextChoices):
    BLOCKED = "blocked", "Blocked"
    SCHEDULED = "scheduled", "Scheduled"
    READY = "ready", "Ready"
    HELD = "held", "Held"
    WAITING = "waiting", "Waiting"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# Every waiting status may also end succeeded or failed without running: ``complete_job`` and
# ``fail_job`` finish a job from outside any worker (an approval, a webhook).
_EXTERNALLY = (Status.SUCCEEDED, Status.FAILED)

TRANSITIONS: dict[Status, frozenset[Status]] = {
    # blocked -> ready | scheduled: its last prerequisite finished and its run condition holds;
    # blocked -> cancelled: the condition can no longer be met (or an operator cancelled it).
    Status.BLOCKED: frozenset(
        {Status.READY, Status.SCHEDULED, Status.CANCELLED, Status.HELD, *_EXTERNALLY}
    ),
    # scheduled -> ready: the promoter, once run_after has come (or an operator's retry).
    # scheduled | ready -> blocked: a released dependent that has not started waits again for a
    # prerequisite redriven (workflow/resume.py), when its run condition says wait.
    Status.SCHEDULED: frozenset(
        {Status.READY, Status.BLOCKED, Status.CANCELLED, Status.HELD, *_EXTERNALLY}
    ),
    # ready -> running: a claim; ready -> running again after a release: the shutdown retaking
    # a job whose body returned just as it was released (worker/shutdown.py);
    # ready -> scheduled: a unique enqueue with on_conflict="replace" restarted its timer.
    Status.READY: frozenset(
        {
            Status.RUNNING,
            Status.SCHEDULED,
            Status.BLOCKED,
            Status.CANCELLED,
            Status.HELD,
            *_EXTERNALLY,
        }
    ),
    # waiting: parked on context.wait_for_signal (no slot, no lease); -> ready once a signal
    # it waits for arrives or its timeout passes (the body runs again and takes it); -> held
    # by an operator (a signal meanwhile is kept for the run after the release).
    Status.WAITING: frozenset({Status.READY, Status.CANCELLED, Status.HELD, *_EXTERNALLY}),
    # held: an operator's hold on a waiting job (operations.hold_job); release_job puts it
    # back where it belongs now: blocked (prerequisites open), scheduled or ready.
    Status.HELD: frozenset(
        {Status.BLOCKED, Status.SCHEDULED, Status.READY, Status.CANCELLED, *_EXTERNALLY}
    ),
    # running -> ready: reaped lease, graceful-shutdown release, retry or snooze without delay;
    # running -> scheduled: retry or snooze with a delay (a durable sleep);
    # running -> waiting: context.wait_for_signal parked it.
    Status.RUNNING: frozenset(
        {
            Status.SUCCEEDED,
            Status.FAILED,
            Status.CANCELLED,
            Status.READY,
            Status.SCHEDULED,
            Status.WAITING,
        }
    ),
    Status.SUCCEEDED: frozenset(),
    # failed is the dead-letter queue; redrive moves a job back to ready (or to blocked, when
    # some of its prerequisites are still open: it waits for them again).
    Status.FAILED: frozenset({Status.READY, Status.BLOCKED}),
    # cancelled -> blocked: a dependent cancelled because a prerequisite failed waits again
    # when that prerequisite is redriven (the workflow resumes from it).
    Status.CANCELLED: frozenset({Status.BLOCKED}),
}

TERMINAL: frozenset[Status] = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLED})
ACTIVE: frozenset[Status] = frozenset(
    {Status.BLOCKED, Status.SCHEDULED, Status.READY, Status.HELD, Status.WAITING, Status.RUNNING}
)
AWAITING_PREREQUISITES: frozenset[Status] = frozenset({Status.BLOCKED, Status.HELD})
"""The statuses of a dependent that may still be waiting on prerequisites: every writer that
changes what a dependent waits on (prerequisites' endings counted down, steps added at run time,
a continuation) treats them alike (workflow/prerequisites.py). A held job's run condition is
decided when it is released, from its prerequisites as they stand then."""


class RunCondition(models.TextChoices):
    """When a job with prerequisites may run (``using(run_if=...)``)."""

    ALL_SUCCEEDED = "all_succeeded", "All prerequisites succeeded"
    ALL_FINISHED = "all_finished", "All prerequisites finished, however they ended"
    ANY_SUCCEEDED = "any_succeeded", "All prerequisites finished, at least one succeeded"


class CatchUp(models.TextChoices):
    """What a schedule fires for the ticks it missed (workers down, schedule disabled)."""

    LATEST = "latest", "Once, for the latest missed tick"
    ALL = "all", "Once for every missed tick"
    NONE = "none", "Nothing: wait for the next tick"


class WorkflowStatus(models.TextChoices):
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


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

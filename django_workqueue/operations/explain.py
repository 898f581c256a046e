"""Why isn't this job running? One answer for the admin's job page, the API
(``GET jobs/{id}/explain/``) and the CLI (``workqueue explain ID``).

The answer is built from ``REASONS``, a table: each row names the statuses it looks at, a check
that returns the facts it found (or None when it does not apply) and the message those facts
fill in. A new waiting status (a signal wait, say) is a row to add, not a branch to find.

>>> answer = operations.explain(job, clearance=Clearance.of(request.user))
>>> [reason.code for reason in answer.reasons]
['scheduled', 'no_worker']
>>> answer.as_dict()["summary"]
'Not running: scheduled to run at 2026-11-27T20:00:00+00:00 (in 42 s).'

Values a user may not see go through ``disclosure``: a limit key derived from the job's
arguments is masked without ``view_job_payload``, and so is an error's message.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from .. import budgets
from ..conf import workqueue_settings as conf
from ..disclosure import Clearance
from ..models import AuditRecord, Checkpoint, Dependency, FlowLimit, Job, Queue, WorkerProcess
from ..registry import TaskSpec, find_task
from ..states import AWAITING_PREREQUISITES, TERMINAL, Status
from .workers import workers

_WAITING = frozenset({Status.BLOCKED, Status.SCHEDULED, Status.READY, Status.HELD, Status.WAITING})
_NOT_REGISTERED = "django_workqueue.exceptions.TaskNotRegistered"
_AUDIT_LOOKBACK = 500  # hold records searched for the one that held this job


@dataclasses.dataclass(frozen=True, slots=True)
class Reason:
    """One finding: ``code`` names its row of ``REASONS``; ``details`` are its facts (JSON)."""

    code: str
    message: str
    details: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Explanation:
    job_id: int
    status: str
    running: bool
    finished: bool
    reasons: list[Reason]

    @property
    def summary(self) -> str:
        if self.finished or self.running:
            return self.reasons[0].message
        if not self.reasons:
            return f"Not running: it is {self.status}, and no known reason keeps it waiting."
        why = "; ".join(reason.message for reason in self.reasons)
        return f"Not running: {why}."

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job_id, "status": self.status, "running": self.running,
            "finished": self.finished, "summary": self.summary,
            "reasons": [dataclasses.asdict(reason) for reason in self.reasons],
        }  # fmt: skip


class Look:
    """What the checks look at: the job, the user's clearance, one clock, cached queries."""

    def __init__(self, job: Job, clearance: Clearance, alias: str) -> None:
        self.job = job
        self.clearance = clearance
        self.alias = alias
        self.now = timezone.now()
        task = find_task(job.task_name)
        self.spec: TaskSpec | None = task.spec if task is not None else None

    def jobs(self) -> Any:
        return Job.objects.using(self.alias)

    @functools.cached_property
    def live_workers(self) -> list[WorkerProcess]:
        return list(workers(alias=self.alias))

    def serving(self, rows: list[WorkerProcess]) -> list[WorkerProcess]:
        return [w for w in rows if not w.queues or self.job.queue in w.queues]


def _at(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _in(look: Look, when: dt.datetime) -> str:
    seconds = (when - look.now).total_seconds()
    if seconds <= 0:
        return "due now"
    return f"in {seconds:.0f} s" if seconds < 120 else f"in {seconds / 60:.0f} min"


# --- the checks: each returns the facts its message needs, or None ---------------------------


def _finished(look: Look) -> dict[str, Any] | None:
    job = look.job
    errors = look.clearance.errors(job.errors or [])
    last = errors[-1] if errors else {}
    how = {
        Status.SUCCEEDED: "succeeded", Status.CANCELLED: "was cancelled",
        Status.FAILED: "failed (dead-lettered)",
    }[Status(job.status)]  # fmt: skip
    error = f": {last.get('type', '')}: {last.get('message', '')}" if last else ""
    return {
        "how": how, "finished_at": _at(job.finished_at), "attempt": job.attempt,
        "max_attempts": job.max_attempts, "attempt_summary": budgets.describe_job(job),
        "error_type": last.get("type"),
        "error_message": last.get("message"), "error": error if job.status != "succeeded" else "",
    }  # fmt: skip


def _running(look: Look) -> dict[str, Any] | None:
    job = look.job
    worker = WorkerProcess.objects.using(look.alias).filter(pk=job.lease_owner).first()
    return {
        "worker": job.lease_owner, "host": worker.host if worker else None,
        "pid": worker.pid if worker else None, "started_at": _at(job.started_at),
        "lease_expires_at": _at(job.lease_expires_at), "attempt": job.attempt,
        "attempt_summary": budgets.describe_job(job),
        "cancel_requested": job.cancel_requested_at is not None,
        "where": f" ({worker.host}, pid {worker.pid})" if worker else " (no longer registered)",
    }  # fmt: skip


def _scheduled(look: Look) -> dict[str, Any] | None:
    return {"run_after": _at(look.job.run_after), "in": _in(look, look.job.run_after)}


def _held(look: Look) -> dict[str, Any] | None:
    holds = AuditRecord.objects.using(look.alias).filter(action="hold").order_by("-created_at")
    for record in holds[:_AUDIT_LOOKBACK]:
        ids = record.target.get("ids") if isinstance(record.target, dict) else None
        if isinstance(ids, list) and look.job.pk in ids:
            return {
                "by": record.actor,
                "at": _at(record.created_at),
                "source": record.source,
                "who": f"{record.actor} ({record.source}) at {record.created_at.isoformat()}",
            }
    return {
        "by": None,
        "at": None,
        "source": None,
        "who": "someone: no audit record names this job (held by a filter, or by code)",
    }


def _paused(look: Look) -> dict[str, Any] | None:
    queue = Queue.objects.using(look.alias).filter(pk=look.job.queue).first()
    if queue is None or queue.paused_at is None:
        return None
    return {"queue": look.job.queue, "paused_at": _at(queue.paused_at)}


def _prerequisites(look: Look) -> dict[str, Any] | None:
    edges = Dependency.objects.using(look.alias).filter(job_id=look.job.pk)
    rows = list(
        edges.order_by("position").values_list(
            "prerequisite_id", "prerequisite__task_name", "prerequisite__status"
        )
    )
    waiting = [
        {"id": pk, "task_name": name, "status": status}
        for pk, name, status in rows
        if status not in TERMINAL
    ]
    if not waiting:
        return None
    listed = ", ".join(f"#{p['id']} {p['task_name']} ({p['status']})" for p in waiting[:10])
    more = f" and {len(waiting) - 10} more" if len(waiting) > 10 else ""
    return {"prerequisites": waiting, "total": len(rows), "list": listed + more}


def _limited(look: Look) -> dict[str, Any] | None:
    job, spec = look.job, look.spec
    if not job.flow_key or not job.flow_key.startswith("limit:") or spec is None:
        return None
    holders = list(
        look.jobs().filter(flow_key=job.flow_key, status=Status.RUNNING)
        .order_by("lease_expires_at").values_list("pk", "lease_owner", "lease_expires_at")
    )  # fmt: skip
    facts: dict[str, Any] = {
        "key": look.clearance.flow_key(job), "concurrency": spec.concurrency,
        "running": [{"id": pk, "worker": owner, "lease_expires_at": _at(until)}
                    for pk, owner, until in holders],
        "rate": None, "frees_at": None,
    }  # fmt: skip
    full = spec.concurrency is not None and len(holders) >= spec.concurrency
    parts = []
    if full:
        ids = ", ".join(f"#{pk}" for pk, _, _ in holders[:10])
        parts.append(f"its {spec.concurrency} place(s) are held by {ids}")
    if spec.rate is not None:
        row = FlowLimit.objects.using(look.alias).filter(pk=job.flow_key).first()
        since = look.now.timestamp() - spec.rate.period
        starts = [(at, n) for at, n in (row.starts if row else []) if at > since]
        used = sum(n for _, n in starts)
        facts["rate"] = {"count": spec.rate.count, "period": spec.rate.period, "used": used}
        if used >= spec.rate.count and starts:
            frees = dt.datetime.fromtimestamp(min(at for at, _ in starts) + spec.rate.period,
                                              tz=dt.UTC)  # fmt: skip
            facts["frees_at"] = frees.isoformat()
            parts.append(f"{used} of {spec.rate.count} starts per {spec.rate.period:g} s used, "
                         f"the window frees at {frees.isoformat()}")  # fmt: skip
    if not parts:
        return None
    facts["why"] = "; ".join(parts)
    return facts


def _signal(look: Look) -> dict[str, Any] | None:
    wait = (
        Checkpoint.objects.using(look.alias)
        .filter(job_id=look.job.pk, kind=Checkpoint.Kind.WAIT, result__isnull=True)
        .order_by("-pk")
        .first()
    )
    if wait is None:
        return None
    return {
        "signal": wait.signal, "since": _at(wait.created_at), "times_out_at": _at(wait.wakes_at),
        "timeout": f"times out at {wait.wakes_at.isoformat()}" if wait.wakes_at
        else "no timeout",
    }  # fmt: skip


def _no_worker(look: Look) -> dict[str, Any] | None:
    if look.serving(look.live_workers):
        return None
    rows = look.serving(list(WorkerProcess.objects.using(look.alias).order_by("-last_seen_at")))
    last = rows[0].last_seen_at if rows else None
    return {
        "queue": look.job.queue, "last_seen_at": _at(last),
        "last": f"the last one that did was seen at {last.isoformat()}" if last
        else "none is registered",
    }  # fmt: skip


def _not_registered(look: Look) -> dict[str, Any] | None:
    errors = look.job.errors or []
    failed_so = bool(errors) and errors[-1].get("type") == _NOT_REGISTERED
    if look.spec is not None and not failed_so:
        return None
    return {
        "task_name": look.job.task_name, "registered_here": look.spec is not None,
        "last_attempt_not_registered": failed_so,
        "why": "its last attempt failed because the worker that claimed it does not know it"
        if failed_so else "it is not registered in this process (the one answering)",
    }  # fmt: skip


def _behind(look: Look) -> dict[str, Any] | None:
    job = look.job
    ready = look.jobs().filter(queue=job.queue, status=Status.READY).exclude(pk=job.pk)
    higher = ready.filter(priority__gt=job.priority).count()
    earlier = ready.filter(priority=job.priority, run_after__lt=job.run_after).count()
    if not higher and not earlier:
        return None
    return {"higher_priority": higher, "same_priority_earlier": earlier, "queue": job.queue}


def _next_in_line(look: Look) -> dict[str, Any] | None:
    return {"queue": look.job.queue}


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """A row of ``REASONS``: for a job in one of ``statuses``, ``check`` finds the facts (or
    None); ``message`` is filled in with them."""

    code: str
    statuses: frozenset[str]
    check: Callable[[Look], dict[str, Any] | None]
    message: str
    alone: bool = False
    """When it applies, it is the whole answer (a finished or running job)."""


_ENDED = frozenset(TERMINAL)
_ANY_WAIT = frozenset(_WAITING)
_ACTIVE = frozenset(_WAITING | {Status.RUNNING})

REASONS: tuple[Row, ...] = (
    Row("finished", _ENDED, _finished,
        "It {how} at {finished_at} after {attempt_summary}{error}.", alone=True),
    Row("running", frozenset({Status.RUNNING}), _running,
        "It is claimed and running on worker {worker}{where} since {started_at} "
        "({attempt_summary}; lease until {lease_expires_at}).", alone=True),
    Row("held", frozenset({Status.HELD}), _held,
        "held by an operator, {who}; release it to let it run"),
    Row("scheduled", frozenset({Status.SCHEDULED}), _scheduled,
        "scheduled to run at {run_after} ({in})"),
    Row("signal", frozenset({Status.WAITING}), _signal,
        "waiting for signal '{signal}' since {since}, {timeout}"),
    # A held job still waits for its prerequisites (states.AWAITING_PREREQUISITES).
    Row("prerequisites", AWAITING_PREREQUISITES, _prerequisites,
        "blocked by {total} prerequisite(s) not finished: {list}"),
    Row("queue_paused", _ANY_WAIT, _paused, "its queue {queue} is paused since {paused_at}"),
    Row("limit", frozenset({Status.READY}), _limited,
        "waiting for its limit {key}: {why}"),
    Row("no_worker", _ANY_WAIT, _no_worker,
        "no live worker serves its queue {queue} ({last})"),
    Row("not_registered", _ACTIVE, _not_registered,
        "its task {task_name} may not be registered in the workers: {why} (workers record "
        "their queues, not their tasks)"),
    Row("behind", frozenset({Status.READY}), _behind,
        "behind {higher_priority} ready job(s) of higher priority and {same_priority_earlier} "
        "of its priority that came first in queue {queue}"),
    Row("ready", frozenset({Status.READY}), _next_in_line,
        "ready: a worker serving {queue} claims it at its next free slot"),
)  # fmt: skip
"""Every reason, in the order they are told. ``ready`` is said only when nothing else is."""


def explain(
    job: Job | int, *, clearance: Clearance | None = None, alias: str | None = None
) -> Explanation:
    """Why ``job`` is not running (or how it ended, or where it runs), from ``REASONS``.
    ``clearance`` (default: everything, the shell's) decides what values are shown."""
    alias = alias or conf.DATABASE
    if not isinstance(job, Job):
        job = Job.objects.using(alias).get(pk=job)
    look = Look(job, clearance or Clearance.everything(), alias)
    reasons: list[Reason] = []
    for row in REASONS:
        if job.status not in row.statuses or (row.code == "ready" and reasons):
            continue
        facts = row.check(look)
        if facts is None:
            continue
        reasons.append(Reason(row.code, row.message.format(**facts), facts))
        if row.alone:
            break
    return Explanation(
        job_id=job.pk, status=job.status, running=job.status == Status.RUNNING,
        finished=job.status in TERMINAL, reasons=reasons,
    )  # fmt: skip

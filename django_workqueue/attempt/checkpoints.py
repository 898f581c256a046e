"""Checkpoints: what a job's body already finished, answered from the store when it runs again.

A body runs again after a retry, a sleep, a crash. ``context.step(name, fn)`` runs ``fn`` once
per job: its result is stored as a ``Checkpoint`` row as soon as ``fn`` returns and the same
call of a later run returns the stored result instead of calling ``fn``. ``context.sleep``
stores when it ends the same way (sleeps are named by their order in the body), so the run
that resumes after it passes it by.

Where a checkpoint is written decides what a failure does to it, as for ``context.claim``: in
a task without ``atomic=True`` it commits at once (or with the body's own ``transaction.
atomic()`` block, if the step runs inside one: with the step's database work); in an
``atomic=True`` task it joins the task's transaction, so a failed attempt rolls back the step's
writes and its checkpoint together and the retry runs the step again. A sleep ends such an
attempt by committing the body's writes so far with its checkpoints (``run.py``).

One row per (job, kind, name), by a unique constraint: if two runs of a job store the same step
(a worker that lost its lease and the one that took the job over), the first stored result
stands and both return it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction

from ..conf import workqueue_settings as conf
from ..exceptions import (
    IncompatibleVersion,
    InvalidOption,
    NaiveDatetime,
    SignalTimeout,
    Sleeping,
    WaitingForSignal,
)
from ..models import Checkpoint
from ..payload import check_size, describe, encode
from ..workflow import inbox

if TYPE_CHECKING:
    from ..db import Driver
    from ..registry import TaskSpec
_MISSING = object()


class Checkpoints:
    """The checkpoints of one run of one job's body (one per ``JobContext``)."""

    def __init__(
        self, driver: Driver, job_id: int, task_name: str, workflow_id: int | None = None,
        *, atomic: bool = False, version: int = 1,
    ) -> None:  # fmt: skip
        self._driver = driver
        self._version = version
        self._atomic = atomic
        self._job_id = job_id
        self._task_name = task_name
        self._workflow_id = workflow_id
        self._steps: set[str] = set()
        self._sleeps = 0
        self._waits = 0

    def step(self, name: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        name = self._check_name(name)
        stored = self._read(Checkpoint.Kind.STEP, name)
        if stored is not _MISSING:
            return stored[0]
        value = fn(*args, **kwargs)
        owner = f"the step {name!r} of {self._task_name} returned a value that"
        encoded = encode(value, "result", owner)
        check_size(len(encoded.encode()), conf.MAX_RESULT_BYTES,
                   f"the result of the step {name!r} of {self._task_name} is",
                   "MAX_RESULT_BYTES")  # fmt: skip
        # What every later run will get back, so this one gets the same (a tuple is a list).
        result = json.loads(encoded)
        return self._store(Checkpoint.Kind.STEP, name, result=result)[0]

    def sleep_until(self, when: Callable[[datetime], datetime]) -> None:
        """Park the job until ``when(now)`` (the database's ``now``), unless this sleep of the
        body was already stored: then until the stored time, or not at all once it passed."""
        self._check_parks_cleanly("context.sleep")
        self._sleeps += 1
        name = str(self._sleeps)
        now = self._driver.now()
        stored = self._read(Checkpoint.Kind.SLEEP, name)
        wakes_at = stored[1] if stored is not _MISSING else None
        if wakes_at is None:
            wakes_at = self._store(Checkpoint.Kind.SLEEP, name, wakes_at=when(now))[1]
        assert wakes_at is not None  # a sleep's checkpoint always has one
        remaining = (wakes_at - now).total_seconds()
        if remaining > 0:
            raise Sleeping(delay=remaining, until=wakes_at)

    def wait_for_signal(self, name: Any, timeout: Any) -> Any:
        """The payload of the signal ``name`` this wait of the body took: at once if one is
        kept (or the wait was answered in an earlier run), else park the job ``waiting``."""
        name = inbox.check_name("context.wait_for_signal", name)
        seconds = None if timeout is None else _seconds("context.wait_for_signal: timeout",
                                                        timeout)  # fmt: skip
        self._check_parks_cleanly("context.wait_for_signal")
        self._waits += 1
        ordinal = str(self._waits)
        now = self._driver.now()
        wait = self._wait(ordinal)
        if wait is None:
            times_out = None if seconds is None else now + timedelta(seconds=seconds)
            self._store(Checkpoint.Kind.WAIT, ordinal, wakes_at=times_out, signal=name)
            wait = self._wait(ordinal)
        assert wait is not None  # stored just now, or by an earlier run
        pk, result, times_out = wait
        if result is None:
            result = self._answer(pk, name, now, times_out)
        if "payload" in result:
            return result["payload"]
        raise SignalTimeout(
            f"no signal {name!r} arrived for job {self._job_id} before its timeout "
            f"({times_out.isoformat() if times_out else 'none'})"
        )

    def _answer(
        self, pk: int, name: str, now: datetime, times_out: datetime | None
    ) -> dict[str, Any]:
        """Take a kept signal as the wait's answer, or its timeout once it passed, or park."""
        alias = self._driver.alias
        answered = Checkpoint.objects.using(alias).filter(pk=pk, result__isnull=True)
        try:
            with transaction.atomic(using=alias):
                found, payload = inbox.take(alias, self._job_id, self._workflow_id, name)
                if found:
                    result: dict[str, Any] = {"payload": payload}
                elif times_out is not None and times_out <= now:
                    result = {"timed_out": True}
                else:
                    result = {}
                if result and not answered.update(result=result):
                    raise _AnsweredElsewhere  # rolls back the signal taken
        except _AnsweredElsewhere:
            stored = self._wait_answer(pk)
            if stored is not None:
                return stored
            result = {}
        if not result:
            delay = 0.0 if times_out is None else (times_out - now).total_seconds()
            raise WaitingForSignal(name, delay=delay, until=times_out)
        return result

    def _wait(self, ordinal: str) -> tuple[int, Any, datetime | None] | None:
        rows = list(
            Checkpoint.objects.using(self._driver.alias)
            .filter(job_id=self._job_id, kind=Checkpoint.Kind.WAIT, name=ordinal)
            .values_list("pk", "result", "wakes_at")[:1]
        )
        return rows[0] if rows else None

    def _wait_answer(self, pk: int) -> dict[str, Any] | None:
        return (
            Checkpoint.objects.using(self._driver.alias)
            .filter(pk=pk)
            .values_list("result", flat=True)
            .first()
        )

    def _check_parks_cleanly(self, owner: str) -> None:
        """Refuse a sleep or wait inside a ``transaction.atomic()`` block the body opened: the
        block would roll back the checkpoint with the ending that parks the job, which would
        then sleep again (or wait for ever) when it runs again."""
        runners = 1 if self._atomic else 0  # an atomic=True task's own transaction
        if len(self._driver.connection.atomic_blocks) > runners:
            raise InvalidOption(
                f"{owner} was called inside a transaction.atomic() block of {self._task_name}; "
                f"the block would roll back what the call stores as it parks the job. Call it "
                f"outside the block (in an atomic=True task, the task's own transaction "
                f"commits the body's writes so far with it)"
            )

    def _check_name(self, name: Any) -> str:
        name = inbox.check_name("context.step", name)
        if name in self._steps:
            raise InvalidOption(
                f"context.step: {self._task_name} used the step name {name!r} twice in one "
                f"run; each step of a job needs its own name (its checkpoint is found by it), "
                f"e.g. f'charge:{{invoice_id}}' for a step run in a loop"
            )
        self._steps.add(name)
        return name

    def _read(self, kind: str, name: str) -> Any:
        """(result, wakes_at) of the stored checkpoint, or ``_MISSING``."""
        rows = list(
            Checkpoint.objects.using(self._driver.alias)
            .filter(job_id=self._job_id, kind=kind, name=name)
            .values_list("result", "wakes_at")[:1]
        )
        return rows[0] if rows else _MISSING

    def _store(
        self,
        kind: str,
        name: str,
        *,
        result: Any = None,
        wakes_at: datetime | None = None,
        signal: str = "",
    ) -> tuple[Any, datetime | None]:
        """Store the checkpoint; return what is stored (this one, or an earlier writer's)."""
        alias = self._driver.alias
        try:
            with transaction.atomic(using=alias):  # a savepoint inside the body's transaction
                Checkpoint.objects.using(alias).create(
                    job_id=self._job_id, kind=kind, name=name, result=result,
                    wakes_at=wakes_at, signal=signal, task_version=self._version,
                )  # fmt: skip
        except IntegrityError:
            stored = self._read(kind, name)
            if stored is _MISSING:  # not a second writer: the job's row is gone
                raise
            return stored
        return result, wakes_at


def check_version(driver: Driver, job_id: int, spec: TaskSpec) -> None:
    """Raise ``IncompatibleVersion`` if the job's stored checkpoints were written by a version
    of its task that ``spec`` (the running code) neither is nor lists as compatible."""
    accepted = (spec.version, *spec.compatible_versions)
    stored = sorted(
        Checkpoint.objects.using(driver.alias)
        .filter(job_id=job_id)
        .exclude(task_version__in=accepted)
        .values_list("task_version", flat=True)
        .distinct()
    )
    if not stored:
        return
    versions = ", ".join(map(str, stored))
    raise IncompatibleVersion(
        f"job {job_id} of {spec.name} was started by version {versions} of the task, and the "
        f"running code is version {spec.version}, which does not resume it: its checkpoints "
        f"(steps, sleeps, waits) were stored by the other version's body. If version "
        f"{spec.version} can resume them, declare @task(version={spec.version}, "
        f"compatible_versions=({versions},)) and redrive the job; otherwise keep a worker "
        f"running version {versions} until such jobs finish (docs/guides/long-running.md, "
        f'"Deploying new versions")'
    )


class _AnsweredElsewhere(Exception):
    """Another run of the job answered this wait first (its answer stands)."""


def _seconds(owner: str, seconds: Any) -> float:
    """A number of seconds (or a timedelta), zero or more."""
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise InvalidOption(
            f"{owner} must be a number of seconds (or a timedelta), zero or more, "
            f"got {describe(seconds)}"
        )
    timedelta(seconds=seconds)  # OverflowError for an absurd number, at the call
    return float(seconds)


def wake_time(owner: str, when: Any) -> Callable[[datetime], datetime]:
    """``when`` of ``sleep_until``, checked: an aware datetime."""
    if not isinstance(when, datetime):
        raise InvalidOption(f"{owner}: when must be an aware datetime, got {describe(when)}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise NaiveDatetime(
            f"{owner}: when is a naive datetime ({when.isoformat()}); give it a time zone "
            f"(django.utils.timezone.make_aware, or datetime.now(UTC) + ...)"
        )
    return lambda now: when


def after(owner: str, seconds: Any) -> Callable[[datetime], datetime]:
    """``seconds`` of ``sleep``, checked: a number or timedelta, zero or more."""
    delta = timedelta(seconds=_seconds(f"{owner}: seconds", seconds))
    return lambda now: now + delta

"""Signals: every transition of a job, a workflow and a worker, sent once it has committed.

A receiver learns of a change only after the transaction that made it commits (sent with
``transaction.on_commit`` on the jobs database): a rolled-back enqueue sends nothing, and a
receiver may read the job's row and find the new state. Receivers are called with
``send_robust``: one that raises is logged (Django logs it on the ``django.dispatch`` logger,
with the traceback) and never disturbs the worker or the caller.

Every job signal is sent with ``sender`` the registered task (``@task``'s return value, None
if this process does not know the task) and the keyword arguments ``job_id``, ``task_name``,
``queue``, ``attempt`` and ``worker_id`` (the worker that ran the attempt, or None), plus:

========================  ===============================================================
``job_enqueued``          (``attempt`` is 0) one signal per job written, workflow steps too
``job_started``           a worker's slot is about to run the attempt
``job_succeeded``
``job_retrying``          ``error`` (dict: type, message, traceback), ``delay`` (seconds)
``job_failed``            ``error`` (the last error entry, or None): dead-lettered
``job_cancelled``
``job_snoozed``           ``delay`` (seconds); also a durable sleep or a wait for a signal
                          (``context.sleep``, ``wait_for_signal``: the job is then
                          ``scheduled`` or ``waiting``)
``job_woken``             a ``waiting`` job is ``ready`` again: a signal it waits for arrived
                          (``operations.send_signal``)
``job_reaped``            ``status`` the reaper wrote; ``worker_id`` is the worker that
                          stopped renewing the lease. A reaped job that ends ``failed`` or
                          ``cancelled`` sends that signal next.
========================  ===============================================================

``job_progress`` is the exception: sent in the worker process on every
``context.set_progress`` call, before the (throttled) write commits, with ``job_id``,
``task_name``, ``attempt``, ``current``, ``total``, ``message`` and ``details``.

``workflow_finished``: sender ``Workflow`` (the model), ``workflow_id``, ``status``.
``worker_started`` / ``worker_stopping`` / ``worker_stopped``: sender the ``Worker`` class,
``worker`` (the instance), ``worker_id``, ``queues``.

A signal with no receiver costs one attribute test: nothing is built, nothing is queued.

This module holds the signal objects only; when and with what each is sent is
``signalling.py``'s.
"""

from __future__ import annotations

from django.dispatch import Signal

job_enqueued = Signal()
job_started = Signal()
job_succeeded = Signal()
job_retrying = Signal()
job_failed = Signal()
job_cancelled = Signal()
job_snoozed = Signal()
job_woken = Signal()
job_reaped = Signal()
workflow_finished = Signal()
worker_started = Signal()
worker_stopping = Signal()
worker_stopped = Signal()
job_progress = Signal()

__all__ = [
    "job_cancelled",
    "job_enqueued",
    "job_failed",
    "job_reaped",
    "job_retrying",
    "job_snoozed",
    "job_started",
    "job_succeeded",
    "job_woken",
    "worker_started",
    "worker_stopped",
    "worker_stopping",
    "workflow_finished",
]  # fmt: skip

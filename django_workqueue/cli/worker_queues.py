"""Which queues ``runworker`` serves: ``--queues``, ``--exclude-queues`` and ``--backend``, as
``db_worker`` users know them.

The queues that exist are ``conf.QUEUES`` (``WORKQUEUE["QUEUES"]`` and the ``QUEUES`` of every
``TASKS`` alias on django-workqueue). ``--backend ALIAS`` narrows them to that alias's
``QUEUES``: every alias shares the one jobs table and a job records its queue, not the alias
that enqueued it, so serving an alias means serving its queue names (a queue two aliases name
is one queue, served for both). ``--queues '*'`` is every queue of that set.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from ..conf import WORKQUEUE_BACKEND, workqueue_aliases
from ..conf import workqueue_settings as conf

EVERY_QUEUE = "*"

QueueSlots = list[tuple[str, int | None]]


def queue_names(value: str) -> list[str]:
    """``a,b``: the queues ``--exclude-queues`` leaves out."""
    names = [item.strip() for item in value.split(",") if item.strip()]
    if not names:
        raise argparse.ArgumentTypeError(
            "give at least one queue name, e.g. --exclude-queues reports"
        )
    return names


def backend_queues(alias: str | None) -> list[str]:
    """The queues ``--backend alias`` may serve (None: every queue that exists), or a
    ``CommandError`` naming an alias that is not there or not ours."""
    if alias is None:
        return list(conf.QUEUES)
    tasks = getattr(settings, "TASKS", None) or {}
    if alias not in tasks:
        raise CommandError(
            f"--backend {alias}: TASKS has no alias {alias!r}; its aliases are "
            f"{', '.join(map(repr, tasks)) or 'none'}"
        )
    ours = workqueue_aliases()
    if alias not in ours:
        backend = tasks[alias].get("BACKEND") if isinstance(tasks[alias], dict) else None
        raise CommandError(
            f"--backend {alias}: TASKS[{alias!r}] runs on {backend}, not {WORKQUEUE_BACKEND}; "
            f"runworker serves only aliases whose BACKEND is django-workqueue's "
            f"(aliases that are: {', '.join(map(repr, ours)) or 'none'})"
        )
    return ours[alias]


def select_queues(
    queues: QueueSlots | None, exclude: list[str] | None, backend: str | None
) -> QueueSlots | None:
    """The ``--queues`` a worker serves once ``*``, ``--exclude-queues`` and ``--backend`` are
    applied (None: every queue, nothing narrowed), or a ``CommandError`` for a combination that
    makes no sense."""
    available = backend_queues(backend)
    where = (
        f"TASKS[{backend!r}]['QUEUES'] has"
        if backend
        else "the queues (WORKQUEUE['QUEUES'] and the TASKS aliases' QUEUES) are"
    )
    every = queues is not None and any(name == EVERY_QUEUE for name, _ in queues)
    if every:
        assert queues is not None
        if len(queues) > 1 or queues[0][1] is not None:
            raise CommandError(
                "--queues '*' stands for every queue and takes no other name nor :SLOTS; use "
                "--queues '*' --concurrency N, or list the queues with their slots"
            )
        queues = None
    if queues is not None:
        unknown = [name for name, _ in queues if name not in available]
        if unknown:
            raise CommandError(
                f"unknown queue(s) {', '.join(unknown)}; {where} {', '.join(available)}"
            )
        if exclude:
            raise CommandError(
                "--exclude-queues goes with --queues '*' or no --queues; with a list of "
                "queues, leave the excluded ones out of the list instead"
            )
        return queues
    if not exclude:
        return None if backend is None else [(name, None) for name in available]
    unknown = [name for name in exclude if name not in available]
    if unknown:
        raise CommandError(
            f"--exclude-queues names unknown queue(s) {', '.join(unknown)}; {where} "
            f"{', '.join(available)}"
        )
    kept: QueueSlots = [(name, None) for name in available if name not in exclude]
    if not kept:
        raise CommandError(
            f"--exclude-queues leaves no queue to serve ({where} {', '.join(available)}); "
            f"exclude fewer queues"
        )
    return kept


def parsed_exclusions(value: Any) -> list[str] | None:
    """``--exclude-queues`` as parsed, or as ``call_command`` passes it (a string or list)."""
    if not value:
        return None
    try:
        return queue_names(value if isinstance(value, str) else ",".join(map(str, value)))
    except argparse.ArgumentTypeError as exc:
        raise CommandError(f"--exclude-queues: {exc}") from None

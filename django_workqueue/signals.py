"""Django signals the engine sends, for receivers that observe jobs and workers.

A receiver that raises is logged and never disturbs the engine.
"""

from __future__ import annotations

from django.dispatch import Signal

job_progress = Signal()
"""A running job reported progress (``context.set_progress``), sent in the worker process on
every call, before the (throttled) write: kwargs ``job_id``, ``task_name``, ``attempt``,
``current``, ``total``, ``message``, ``details``; ``sender`` is the task name."""

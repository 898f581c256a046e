"""django-workqueue: a durable job queue for Django that lives in your own database.

>>> from django_workqueue import task
>>> @task(max_attempts=5)
... def send_receipt(order_id): ...
>>> send_receipt.enqueue(42)  # inside transaction.atomic(): exists iff it commits
"""

from .context import AbortReason, JobContext
from .decorator import Task, task
from .exceptions import (
    Discard,
    EnqueueError,
    InvalidArguments,
    InvalidProgress,
    JobCancelled,
    JobNotFinished,
    PayloadNotJSON,
    PayloadTooLarge,
    Retry,
    Snooze,
    TaskNotRegistered,
    WorkqueueError,
)
from .workflow import chain, group

__all__ = [
    "AbortReason",
    "Discard",
    "EnqueueError",
    "InvalidArguments",
    "InvalidProgress",
    "JobCancelled",
    "JobContext",
    "JobNotFinished",
    "PayloadNotJSON",
    "PayloadTooLarge",
    "Retry",
    "Snooze",
    "Task",
    "TaskNotRegistered",
    "WorkqueueError",
    "chain",
    "group",
    "task",
]

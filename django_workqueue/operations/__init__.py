"""Operations on jobs, workflows and schedules: the one implementation that the admin, the
API, realtime and the CLI call.

Each operation is a guarded conditional UPDATE whose row count says what happened, and returns
an ``OperationResult`` naming it; losing a race is reported, never raised.
"""

from .jobs import OperationResult, cancel_job, redrive, retry_job
from .schedules import run_schedule_now
from .workflows import cancel_workflow, complete_job, fail_job

__all__ = [
    "OperationResult",
    "cancel_job",
    "cancel_workflow",
    "complete_job",
    "fail_job",
    "redrive",
    "retry_job",
    "run_schedule_now",
]

"""Operations on jobs, workflows, queues, schedules and workers: the one implementation that the
admin, the API, realtime and the CLI call.

Each operation is a guarded conditional UPDATE whose row count says what happened, and returns
an ``OperationResult`` naming it; losing a race is reported, never raised.
"""

from .explain import Explanation, Reason, explain
from .holds import hold_job, release_job
from .jobs import OperationResult, cancel_job, cancel_jobs, redrive, retry_job
from .purge import purge_jobs
from .queues import pause_queue, resume_queue
from .schedules import run_schedule_now
from .waits import send_signal
from .workers import scale_worker, workers
from .workflows import cancel_workflow, complete_job, fail_job

__all__ = [
    "Explanation",
    "OperationResult",
    "Reason",
    "cancel_job",
    "cancel_jobs",
    "cancel_workflow",
    "complete_job",
    "explain",
    "fail_job",
    "hold_job",
    "pause_queue",
    "purge_jobs",
    "redrive",
    "release_job",
    "resume_queue",
    "retry_job",
    "run_schedule_now",
    "scale_worker",
    "send_signal",
    "workers",
]

"""Django settings for benchmarking django-workqueue: the test project's, plus the no-op task.

The database still comes from DATABASE_URL (the harness points it at ``bench_workqueue`` or at
a SQLite file); the bench task module is registered through WORKQUEUE["TASK_MODULES"].
"""

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS, WORKQUEUE

# The bench's workers serve the bench's tasks alone: the test app registers batch tasks, whose
# claim would cost every pass of the drain a statement of its own (a read of their backlog),
# and keep it from writing and claiming in one statement (worker/runner.py).
INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "testproject.testapp"]
WORKQUEUE = {
    **WORKQUEUE,
    "TASK_MODULES": [*WORKQUEUE.get("TASK_MODULES", []), "bench.workqueue_tasks"],
}
# The long drain (bench/long_drain.py) keeps succeeded jobs this many seconds, not 7 days.
if os.environ.get("BENCH_RETENTION_SECONDS"):
    WORKQUEUE["RETENTION"] = {"succeeded": float(os.environ["BENCH_RETENTION_SECONDS"]) / 86400}

"""The test project with the process-pool tests' queue ``pool`` and its tasks
(``testproject.testapp.pool_tasks``, some of which declare ``hard_timeout``)."""

from testproject.settings import *  # noqa: F403

WORKQUEUE = {
    **WORKQUEUE,  # noqa: F405
    "QUEUES": [*WORKQUEUE["QUEUES"], "pool"],  # noqa: F405
    "TASK_MODULES": [*WORKQUEUE["TASK_MODULES"], "testproject.testapp.pool_tasks"],  # noqa: F405
}

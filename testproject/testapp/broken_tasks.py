"""A task module that fails to import, as one does after a bad deploy or with a missing setting.

Never imported unless named: the bad-input tests (tests/chaos/test_bad_input.py) start a worker
with ``WORKQUEUE_TASK_MODULES=testproject.testapp.broken_tasks``. The task below is what the
module would define; its jobs cannot run while the import fails.
"""

from django_workqueue import task

raise RuntimeError("settings.PAYMENT_API_KEY is missing")


@task
def charge(order_id):  # never registered: the module stops at the line above
    return order_id

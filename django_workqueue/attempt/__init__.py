"""The attempt: run one job's body with its context and middlewares (sync, async, batch) and
decide how it ended, the same way wherever it runs.

Every runner calls it: the worker's slot threads (``run.run``, async bodies on
``asyncloop.AsyncLoop``), batch tasks (``batch.run_batch``), the process pool's child, and,
on the calling thread, skip-queue and ``django_workqueue.testing`` (``inprocess``). How an
ending becomes an ``Outcome`` is ``ending.py``'s; what an outcome writes is ``outcomes.py``'s.
What a lease needs while a body runs is here too: the heartbeat (``lease``), the progress
throttle (``throttle``) and the tidying of a runner's connections between jobs
(``connections``).

This layer imports the layers below it only (models, db drivers, task definitions, enqueue,
workflow, flow); the worker, maintenance, operations and the surfaces import it.
"""

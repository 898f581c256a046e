"""Flow-controlled tasks for the flow claim measurement (``bench/flow_metrics.py``).

Imported only by that measurement's client: a worker that knows flow tasks runs the flow
claim on every pass, and the other measurements measure the plain engine.
"""

from django_workqueue import task

# Limits so high that they never hold a job back: what is measured is their bookkeeping.
HIGH = 1_000_000


@task(name="bench.flow.limited", concurrency=HIGH)
def limited(key):
    return None


@task(name="bench.flow.limited_per_key", concurrency=HIGH, limit_key=lambda key: f"k{key}")
def limited_per_key(key):
    return None


@task(name="bench.flow.rated", rate=f"{HIGH}/s")
def rated(key):
    return None


@task(name="bench.flow.fair", fair_key=lambda key: f"t{key}")
def fair(key):
    return None

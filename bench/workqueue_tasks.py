"""The no-op task django-workqueue runs in every benchmark."""

from bench.stamp import stamp
from django_workqueue import task


@task(name="bench.noop")
def noop(key):
    stamp(key)

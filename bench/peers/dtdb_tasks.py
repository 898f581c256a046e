"""The no-op task django-tasks-db runs in every benchmark."""

from django_tasks import task

from bench.stamp import stamp


@task()
def noop(key):
    stamp(key)

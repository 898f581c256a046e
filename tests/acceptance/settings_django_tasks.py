"""The test project (Django 6+) with an app whose tasks.py defines ``django.tasks`` tasks and a
URLconf whose views' module defines another: where a worker finds Django tasks."""

from testproject.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.support.django_tasks_app"]  # noqa: F405
ROOT_URLCONF = "tests.support.urls_with_django_tasks"

"""A Django 6 project configured by TASKS alone (no WORKQUEUE dict), as a django-tasks-db
project is once its BACKEND line names the WorkqueueBackend."""

import os

from testproject.settings import *  # noqa: F403

del WORKQUEUE  # noqa: F821
# Behind a pooler without prepared-statement support (the PgBouncer 1.18 wrapper of the suite's
# PgBouncer environment, tests/support/pgbouncer.py) a project needs one deployment setting, as
# docs/guides/deployment.md says; it says nothing about TASKS, which stays the configuration.
if os.environ.get("WORKQUEUE_PREPARED_STATEMENTS", "").lower() in ("false", "0", "off", "no"):
    WORKQUEUE = {"PREPARED_STATEMENTS": False}
INSTALLED_APPS = [app for app in INSTALLED_APPS if not app.startswith("testproject.")]  # noqa: F405
INSTALLED_APPS += ["tests.support.django_tasks_app"]
ROOT_URLCONF = "tests.acceptance.urls_without_tasks"
TASKS = {
    "default": {
        "BACKEND": "django_workqueue.backend.WorkqueueBackend",
        "QUEUES": ["default", "emails"],
        # One attempt, as django.tasks' other backends make (issue 30 item 2 makes it the default).
        "OPTIONS": {"TASK_DEFAULTS": {"max_attempts": 1}},
    }
}

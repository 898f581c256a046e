"""A module that no test and no setting imports: a test that finds it in ``sys.modules`` caught
a code path importing a module because a request, a job row or an argument named it.

Importing it runs code (the side effect an attacker would be after): it counts its imports in
the environment, appends its pid to the file ``WORKQUEUE_TEST_IMPORT_MARKER`` names (for
worker processes), and on Django 6+ it defines a ``django.tasks`` task of the ``WorkqueueBackend``
(``run_me``), which an import by name would also have registered and run.
"""

from __future__ import annotations

import os

import django

from tests.support.imports import COUNTER, MARKER

os.environ[COUNTER] = str(int(os.environ.get(COUNTER, "0")) + 1)
if os.environ.get(MARKER):
    with open(os.environ[MARKER], "a") as marker:
        marker.write(f"{os.getpid()}\n")

if django.VERSION >= (6, 0):
    from django.tasks import task

    @task
    def run_me() -> str:
        return "ran"

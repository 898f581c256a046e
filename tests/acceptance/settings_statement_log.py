"""The test project, each statement its Django connections send appended as one line to the
file ``$WQ_STATEMENT_LOG`` (tests/acceptance/test_parked_jobs_cost.py counts them)."""

import os

from django.db.backends.signals import connection_created

from testproject.settings import *  # noqa: F403

_PATH = os.environ["WQ_STATEMENT_LOG"]


def _logged(execute, sql, params, many, context):
    fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(str(sql).split()) + "\n").encode())
    finally:
        os.close(fd)
    return execute(sql, params, many, context)


def _log_statements(sender, connection, **kwargs):
    connection.execute_wrappers.append(_logged)


connection_created.connect(_log_statements, weak=False)

"""``Driver.incurable_connection_error``: which failures to connect no wait cures (runworker
stops at once with the message) and which may pass (it waits). The real refusals, in a real
``runworker``, are in tests/acceptance/test_runworker_arguments.py; here each rule of the
vendor's driver is tried on the error it reads."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import OperationalError, connection

from django_workqueue.db import driver_for


def wrapped(cause: BaseException, text: str | None = None) -> OperationalError:
    """The error as Django raises it: its own class, with the driver's error as the cause."""
    error = OperationalError(text if text is not None else str(cause))
    error.__cause__ = cause
    return error


class PsycopgError(Exception):
    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    ("sqlstate", "message", "expected"),
    [
        ("3D000", "some translated text", "does not exist on the server"),
        (None, 'FATAL:  database "shop" does not exist', "does not exist on the server"),
        ("28P01", "some translated text", "refused the role or password"),
        ("28000", "some translated text", "refused the role or password"),
        (None, 'FATAL:  password authentication failed for user "shop"', "refused the role"),
        (None, 'FATAL:  role "shop" does not exist', "refused the role or password"),
        (None, "FATAL:  no pg_hba.conf entry for host", "refused the role or password"),
    ],
)
def test_postgresql_refusals_no_wait_cures(sqlstate, message, expected):
    problem = driver_for("default").incurable_connection_error(
        wrapped(PsycopgError(message, sqlstate))
    )
    assert problem is not None and expected in problem
    assert message.splitlines()[-1] in problem


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    ("sqlstate", "message"),
    [
        (None, 'connection to server at "127.0.0.1", port 5432 failed: Connection refused'),
        ("57P03", "FATAL:  the database system is starting up"),
        ("08006", "server closed the connection unexpectedly"),
    ],
)
def test_postgresql_failures_that_may_pass_are_waited_for(sqlstate, message):
    error = wrapped(PsycopgError(message, sqlstate))
    assert driver_for("default").incurable_connection_error(error) is None


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite driver's rule")
def test_a_sqlite_file_that_cannot_be_opened_is_not_waited_for():
    cause = sqlite3.OperationalError("unable to open database file")
    cause.sqlite_errorcode = sqlite3.SQLITE_CANTOPEN
    problem = driver_for("default").incurable_connection_error(wrapped(cause))
    name = connection.settings_dict["NAME"]
    assert problem == (
        f"database file {name!r} cannot be opened (unable to open database file); check that "
        f"this user may read and write it and its directory, or correct "
        f"DATABASES['default']['NAME']"
    )


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite driver's rule")
@pytest.mark.parametrize(
    ("code", "message"),
    [(sqlite3.SQLITE_BUSY, "database is locked"), (sqlite3.SQLITE_IOERR, "disk I/O error")],
)
def test_sqlite_failures_that_may_pass_are_waited_for(code, message):
    cause = sqlite3.OperationalError(message)
    cause.sqlite_errorcode = code
    assert driver_for("default").incurable_connection_error(wrapped(cause)) is None

"""System checks: each misconfiguration gets a message naming the problem and the fix."""

from __future__ import annotations

import io
import sys
from unittest import mock

import pytest
from django.conf import settings
from django.core import checks
from django.core.management import call_command, get_commands
from django.core.management.base import SystemCheckError
from django.db import connections
from django.test import override_settings

from django_workqueue import registry, task
from django_workqueue.checks import (
    check_database_settings,
    check_runworker_owner,
    check_settings,
    check_task_imports,
    check_task_queues,
)
from tests.support.settings import workqueue_settings as workqueue

WAL = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000"
GOOD_SQLITE = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": "jobs.sqlite3",
    "OPTIONS": {"transaction_mode": "IMMEDIATE", "init_command": WAL},
}

# These tests add aliases to DATABASES that are only read by the checks, never connected to.
pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


@pytest.fixture(autouse=True, scope="module")
def database_features_read(django_db_setup, django_db_blocker):
    """Django 6.1's JSONField check reads the connection's features, which connect the first
    time they are read: read them here, as an earlier test of a longer run usually has, so
    that these checks, which need no database, pass alone too."""
    with django_db_blocker.unblock():
        for alias in connections:
            _ = connections[alias].features.supports_json_field


def with_jobs_database(alias, entry):
    """Point WORKQUEUE["DATABASE"] at an extra DATABASES entry (never connected to)."""
    return override_settings(
        DATABASES={**settings.DATABASES, alias: entry},
        WORKQUEUE={**settings.WORKQUEUE, "DATABASE": alias},
    )


def ids(messages):
    return [m.id for m in messages]


def only(messages):
    assert len(messages) == 1, messages
    return messages[0]


# --- a clean configuration ----------------------------------------------------------------------


def test_the_test_project_configuration_gives_no_messages():
    assert check_settings() == []
    assert check_database_settings() == []
    assert check_runworker_owner() == []
    assert check_task_imports() == []
    assert check_task_queues() == []


def test_manage_py_check_passes_with_no_warnings():
    out = io.StringIO()
    call_command("check", fail_level="WARNING", stdout=out, stderr=io.StringIO())
    assert "System check identified no issues" in out.getvalue()


def test_all_the_defaults_are_valid():
    with override_settings(WORKQUEUE={}):
        assert check_settings() == []


def test_a_well_configured_sqlite_jobs_database_gives_no_messages():
    with with_jobs_database("jobs", GOOD_SQLITE):
        assert check_database_settings() == []


def test_a_postgresql_jobs_database_gives_no_messages():
    entry = {"ENGINE": "django.db.backends.postgresql", "NAME": "jobs"}
    with with_jobs_database("jobs", entry):
        assert check_database_settings() == []


def test_the_checks_are_registered_with_django():
    with workqueue(BOGUS=1):
        found = [m for m in checks.run_checks() if m.id and m.id.startswith("django_workqueue")]
    assert ids(found) == ["django_workqueue.E002"]


# --- WORKQUEUE settings -------------------------------------------------------------------------


def test_an_unknown_key_is_an_error_suggesting_the_nearest_setting():
    with workqueue(QUEUE=["default"], POLL_INTERVALL=2):
        messages = check_settings()
    assert ids(messages) == ["django_workqueue.E002", "django_workqueue.E002"]
    assert [m.msg for m in messages] == [
        "WORKQUEUE has an unknown setting 'POLL_INTERVALL'.",
        "WORKQUEUE has an unknown setting 'QUEUE'.",
    ]
    assert all(isinstance(m, checks.Error) for m in messages)
    assert [m.hint for m in messages] == ["Did you mean 'POLL_INTERVAL'?", "Did you mean 'QUEUES'?"]


def test_an_unknown_setting_near_no_name_points_to_the_settings_reference():
    with workqueue(FROBNICATE=1):
        message = only(check_settings())
    assert message.msg == "WORKQUEUE has an unknown setting 'FROBNICATE'."
    assert message.hint == "See docs/reference/settings.md for the settings there are."


def test_workqueue_that_is_not_a_dict_is_an_error():
    with override_settings(WORKQUEUE=["default"]):
        message = only(check_settings())
    assert (message.id, message.msg) == ("django_workqueue.E002", "WORKQUEUE must be a dict.")


@pytest.mark.parametrize("queues", [[], "default", ["default", ""], ["default", 7], ["q" * 101]])
def test_bad_queues_are_an_error(queues):
    with workqueue(QUEUES=queues, DEFAULT_QUEUE="default"):
        message = only(check_settings())
    assert message.id == "django_workqueue.E002"
    assert message.msg == (
        f"WORKQUEUE['QUEUES'] must be a non-empty list of queue names, got {queues!r}."
    )


def test_a_tuple_of_queues_is_fine():
    with workqueue(QUEUES=("default", "mail")):
        assert check_settings() == []


# The queues of TASKS' aliases are queues too (conf.QUEUES): these tests set WORKQUEUE's alone.
NO_TASKS_QUEUES = override_settings(TASKS={})


@NO_TASKS_QUEUES
def test_default_queue_missing_from_queues_is_an_error():
    with workqueue(QUEUES=["mail", "reports"]):
        message = only(check_settings())
    assert message.id == "django_workqueue.E002"
    assert message.msg == "WORKQUEUE['DEFAULT_QUEUE'] 'default' is not in WORKQUEUE['QUEUES']."


def test_a_default_queue_listed_in_queues_is_fine():
    with workqueue(QUEUES=["mail"], DEFAULT_QUEUE="mail"):
        assert check_settings() == []


@pytest.mark.parametrize(
    "name", ["POLL_INTERVAL", "HEARTBEAT_INTERVAL", "REAPER_INTERVAL", "RETRY_BACKOFF_MAX"]
)
@pytest.mark.parametrize("value", [0, -1, -0.5, True, "1", None])
def test_non_positive_intervals_are_an_error(name, value):
    with workqueue(**{name: value}):
        message = only(check_settings())
    assert message.id == "django_workqueue.E002"
    assert message.msg == f"WORKQUEUE[{name!r}] must be a positive number, got {value!r}."


@pytest.mark.parametrize("name", ["POLL_INTERVAL", "RETRY_BACKOFF_MAX"])
def test_fractional_intervals_are_fine(name):
    with workqueue(**{name: 0.25}):
        assert check_settings() == []


@pytest.mark.parametrize(
    "name",
    ["MAX_PAYLOAD_BYTES", "MAX_RESULT_BYTES", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_LEASE_SECONDS"],
)
@pytest.mark.parametrize("value", [0, -5, 1.5, True, "100"])
def test_non_positive_integers_are_an_error(name, value):
    with workqueue(**{name: value}):
        message = only(check_settings())
    assert message.id == "django_workqueue.E002"
    assert message.msg == f"WORKQUEUE[{name!r}] must be a positive integer, got {value!r}."


@pytest.mark.parametrize("value", [-0.1, 1.5, "0.1", True])
def test_jitter_outside_zero_to_one_is_an_error(value):
    with workqueue(RETRY_JITTER=value):
        message = only(check_settings())
    assert message.id == "django_workqueue.E002"
    assert message.msg == (
        f"WORKQUEUE['RETRY_JITTER'] must be a fraction from 0 to 1, got {value!r}."
    )


@pytest.mark.parametrize("value", [0, 1, 0.5])
def test_jitter_bounds_are_inclusive(value):
    with workqueue(RETRY_JITTER=value):
        assert check_settings() == []


@pytest.mark.parametrize("value", [-1, "30", True])
def test_a_negative_shutdown_grace_is_an_error(value):
    with workqueue(SHUTDOWN_GRACE_SECONDS=value):
        message = only(check_settings())
    assert message.msg == "WORKQUEUE['SHUTDOWN_GRACE_SECONDS'] must be a number of seconds >= 0."


def test_a_zero_shutdown_grace_is_fine():
    with workqueue(SHUTDOWN_GRACE_SECONDS=0):
        assert check_settings() == []


@pytest.mark.parametrize("value", [-1, 1.5, "2", True, None])
def test_maintainer_standbys_must_be_a_whole_number_from_zero(value):
    with workqueue(MAINTAINER_STANDBYS=value):
        message = only(check_settings())
    assert message.msg == (
        f"WORKQUEUE['MAINTAINER_STANDBYS'] must be a whole number >= 0, got {value!r}."
    )
    assert "direct connection" in message.hint


@pytest.mark.parametrize("value", [0, 1, 5])
def test_zero_or_more_maintainer_standbys_are_fine(value):
    with workqueue(MAINTAINER_STANDBYS=value):
        assert check_settings() == []


def test_every_bad_value_is_reported_at_once():
    with workqueue(POLL_INTERVAL=0, MAX_PAYLOAD_BYTES=-1, RETRY_JITTER=2):
        assert len(check_settings()) == 3


def test_use_tz_off_is_an_error():
    with override_settings(USE_TZ=False):
        message = only(check_settings())
    assert message.id == "django_workqueue.E005"
    assert "needs USE_TZ = True" in message.msg
    assert message.hint == "Set USE_TZ = True in your settings."


# --- the jobs database --------------------------------------------------------------------------


def test_a_jobs_database_missing_from_databases_is_an_error():
    with workqueue(DATABASE="jobs"):
        message = only(check_database_settings())
    assert message.id == "django_workqueue.E001"
    assert message.msg == "WORKQUEUE['DATABASE'] is 'jobs', which is not in DATABASES."
    assert message.hint == "Use one of: default."


def test_an_unsupported_vendor_is_an_error():
    entry = {"ENGINE": "django.db.backends.mysql", "NAME": "legacy"}
    with with_jobs_database("legacy", entry):
        message = only(check_database_settings())
    assert message.id == "django_workqueue.E001"
    assert message.msg == (
        "django-workqueue supports PostgreSQL and SQLite; database 'legacy' uses "
        "django.db.backends.mysql."
    )
    assert message.hint == "Point WORKQUEUE['DATABASE'] at a PostgreSQL or SQLite database."


def test_postgis_counts_as_postgresql():
    entry = {"ENGINE": "django.contrib.gis.db.backends.postgis", "NAME": "geo"}
    with with_jobs_database("geo", entry):
        assert check_database_settings() == []


def test_sqlite_without_wal_is_a_warning():
    entry = {**GOOD_SQLITE, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
    with with_jobs_database("jobs", entry):
        message = only(check_database_settings())
    assert isinstance(message, checks.Warning)
    assert message.id == "django_workqueue.W003"
    assert "SQLite database 'jobs' is not in WAL mode" in message.msg
    assert "PRAGMA journal_mode=WAL" in message.hint


def test_sqlite_without_immediate_transactions_is_a_warning():
    entry = {**GOOD_SQLITE, "OPTIONS": {"init_command": WAL}}
    with with_jobs_database("jobs", entry):
        message = only(check_database_settings())
    assert isinstance(message, checks.Warning)
    assert message.id == "django_workqueue.W004"
    assert "SQLite database 'jobs' starts transactions DEFERRED" in message.msg
    assert message.hint == 'Add OPTIONS["transaction_mode"] = "IMMEDIATE".'


def test_sqlite_without_options_gets_both_warnings():
    entry = {"ENGINE": "django.db.backends.sqlite3", "NAME": "jobs.sqlite3"}
    with with_jobs_database("jobs", entry):
        assert ids(check_database_settings()) == [
            "django_workqueue.W003",
            "django_workqueue.W004",
        ]


def test_sqlite_options_are_read_loosely():
    options = {"transaction_mode": "immediate", "init_command": "pragma JOURNAL_MODE = wal"}
    with with_jobs_database("jobs", {**GOOD_SQLITE, "OPTIONS": options}):
        assert check_database_settings() == []


# --- the runworker command ----------------------------------------------------------------------


def test_runworker_belongs_to_django_workqueue():
    assert get_commands()["runworker"] == "django_workqueue"


def test_a_shadowed_runworker_is_an_error_naming_the_fix():
    with mock.patch("django_workqueue.checks.get_commands", return_value={"runworker": "channels"}):
        message = only(check_runworker_owner())
    assert isinstance(message, checks.Error)
    assert message.id == "django_workqueue.E004"
    assert message.msg == "The runworker command belongs to 'channels', not django_workqueue."
    assert message.hint == "List 'django_workqueue' before 'channels' in INSTALLED_APPS."


def test_a_shadowed_runworker_fails_manage_py_check():
    with (
        mock.patch("django_workqueue.checks.get_commands", return_value={"runworker": "channels"}),
        pytest.raises(SystemCheckError) as raised,
    ):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    assert "django_workqueue.E004" in str(raised.value)


# --- psycopg 3 for the listener -----------------------------------------------------------------

POSTGRESQL = {"ENGINE": "django.db.backends.postgresql", "NAME": "jobs"}


def without_psycopg():
    """Make ``import psycopg`` fail, as on a project that runs Django on psycopg2."""
    return mock.patch.dict(sys.modules, {"psycopg": None})


def test_postgresql_without_psycopg_3_is_a_warning_naming_both_fixes():
    with with_jobs_database("jobs", POSTGRESQL), without_psycopg():
        message = only(check_database_settings())
    assert isinstance(message, checks.Warning)
    assert message.id == "django_workqueue.W008"
    assert message.msg.startswith(
        "The jobs database 'jobs' is PostgreSQL and WORKQUEUE['LISTEN_NOTIFY'] is on, but "
        "psycopg 3 cannot be imported (ModuleNotFoundError: "
    )
    assert message.msg.endswith(
        "workers cannot listen for NOTIFY and find new jobs only by polling."
    )
    assert message.hint == (
        "Install psycopg 3 (pip install 'psycopg[binary]', or 'django-workqueue[postgres]'), or "
        "set WORKQUEUE['LISTEN_NOTIFY'] = False to poll on purpose."
    )


def test_postgresql_without_psycopg_3_is_fine_when_listen_notify_is_off():
    entry = {**settings.DATABASES, "jobs": POSTGRESQL}
    with (
        override_settings(
            DATABASES=entry,
            WORKQUEUE={**settings.WORKQUEUE, "DATABASE": "jobs", "LISTEN_NOTIFY": False},
        ),
        without_psycopg(),
    ):
        assert check_database_settings() == []


def test_sqlite_does_not_need_psycopg():
    with with_jobs_database("jobs", GOOD_SQLITE), without_psycopg():
        assert check_database_settings() == []


# --- the queues of registered tasks -------------------------------------------------------------


@pytest.fixture
def restore_registry():
    saved = dict(registry._registry)
    yield
    registry._registry.clear()
    registry._registry.update(saved)


def test_a_task_whose_queue_is_not_in_queues_is_an_error_naming_the_fix(restore_registry):
    @task(name="shop.tasks.send_invoice", queue="billing")
    def send_invoice(invoice_id): ...

    message = only(check_task_queues())
    assert isinstance(message, checks.Error)
    assert message.id == "django_workqueue.E007"
    assert message.msg == (
        "Task shop.tasks.send_invoice has queue 'billing', which is not in WORKQUEUE['QUEUES']."
    )
    assert message.hint == (
        "Add 'billing' to WORKQUEUE['QUEUES'], or give the task one of 'default', 'mail', "
        "'reports', 'low' (@task(queue=...))."
    )


@NO_TASKS_QUEUES
def test_every_task_on_a_removed_queue_is_reported():
    with workqueue(QUEUES=["default", "reports", "low"]):
        messages = check_task_queues()
    names = {name for name, t in registry.registered_tasks().items() if t.spec.queue == "mail"}
    assert "testproject.testapp.tasks.send_mail" in names
    assert [m.msg.split()[1] for m in messages] == sorted(names)
    assert {m.id for m in messages} == {"django_workqueue.E007"}


@NO_TASKS_QUEUES
def test_a_default_queue_missing_from_queues_is_reported_once_not_per_task():
    with workqueue(QUEUES=["mail"]):
        assert ids(check_settings()) == ["django_workqueue.E002"]
        assert check_task_queues() == []


def test_the_task_queue_check_is_registered_with_django(restore_registry):
    task(name="shop.tasks.nowhere", queue="nowhere")(lambda: None)
    found = [m for m in checks.run_checks() if m.id == "django_workqueue.E007"]
    assert [m.msg.split()[1] for m in found] == ["shop.tasks.nowhere"]


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_prepared_statements_must_be_a_boolean(value):
    with workqueue(PREPARED_STATEMENTS=value):
        message = only(check_settings())
    assert message.id == "django_workqueue.E002"
    assert message.msg == f"WORKQUEUE['PREPARED_STATEMENTS'] must be True or False, got {value!r}."
    assert "PgBouncer before 1.21" in message.hint


@pytest.mark.parametrize("value", [True, False])
def test_prepared_statements_on_or_off_is_fine(value):
    with workqueue(PREPARED_STATEMENTS=value):
        assert check_settings() == []


@pytest.mark.parametrize("value", [-1, 5, "1", True])
def test_a_bad_claim_ahead_is_an_error_naming_the_range(value):
    with workqueue(CLAIM_AHEAD=value):
        message = only(check_settings())
    assert message.id == "django_workqueue.E002"
    assert message.msg.startswith("WORKQUEUE['CLAIM_AHEAD'] must be ")
    assert "0" in message.msg and "4" in message.msg


def test_a_claim_ahead_of_one_per_slot_is_fine():
    with workqueue(CLAIM_AHEAD=1):
        assert check_settings() == []

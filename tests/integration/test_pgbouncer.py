"""The jobs database behind PgBouncer 1.18 in transaction pooling mode: what a pooler that keeps
no session state between transactions means for enqueue's prepared statements and a worker's
session name. PostgreSQL only by design (PgBouncer is a PostgreSQL pooler); every test starts
a pooler of its own (``small_pooler``) in front of the test server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, connections
from django.db.utils import load_backend

from django_workqueue import db as drivers
from django_workqueue.db import driver_for
from django_workqueue.models import Job
from testproject.testapp.tasks import record
from tests.support.pgbouncer import Pooler, admin, console_name
from tests.support.settings import workqueue_settings

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pooled(small_pooler: Pooler) -> Iterator[str]:
    """A ``pooled`` connection to the test database through ``small_pooler``, made the jobs
    database (this thread's connection only, as ``jobs_alias``)."""
    settings_dict = {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": small_pooler.port}
    connections["pooled"] = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(
        settings_dict, "pooled"
    )
    try:
        yield "pooled"
    finally:
        connections["pooled"].close()
        del connections["pooled"]
        drivers._drivers.pop("pooled", None)


def test_prepared_statements_lost_between_server_connections_name_the_setting(pooled, small_pooler):
    with workqueue_settings(DATABASE=pooled, PREPARED_STATEMENTS=True):
        record.enqueue("prepared on the first server connection")
        # The pooler closes that server connection: the next transaction gets a fresh one,
        # where psycopg's prepared statement does not exist.
        admin(
            small_pooler.url("pgbouncer"),
            f"RECONNECT {console_name(connection.settings_dict['NAME'])}",
        )
        with pytest.raises(
            ImproperlyConfigured, match=r"WORKQUEUE\['PREPARED_STATEMENTS'\] = False"
        ):
            record.enqueue("bound to a statement this server connection never saw")


def test_without_prepared_statements_enqueue_works_on_any_server_connection(pooled, small_pooler):
    with workqueue_settings(DATABASE=pooled, PREPARED_STATEMENTS=False):
        first = record.enqueue("first")
        admin(
            small_pooler.url("pgbouncer"),
            f"RECONNECT {console_name(connection.settings_dict['NAME'])}",
        )
        second = record.enqueue("second")
    assert Job.objects.filter(pk__in=[first.pk, second.pk]).count() == 2


def test_a_session_through_a_pooler_is_not_named(pooled):
    """The name would stay on the server connection for the pooler's next client (PgBouncer
    re-applies a client's application_name, and keeps it for clients that have none)."""
    pooled_connection = connections[pooled]
    driver_for(pooled).name_session("workqueue:pooled", pooled_connection)
    with pooled_connection.cursor() as cursor:
        cursor.execute("SHOW application_name")
        assert cursor.fetchone()[0] != "workqueue:pooled"

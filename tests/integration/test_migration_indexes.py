"""Migration 0010 changes the jobs table's indexes without blocking its writes on PostgreSQL
(``db/migration_ops.py``), and is reversible on both databases."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from django_workqueue.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

APP = "django_workqueue"
BEFORE, AFTER = (APP, "0009_admin_indexes"), (APP, "0010_job_partial_indexes")
FK_INDEX = "django_workqueue_job_workflow_id_27550c09"


def indexes() -> dict[str, dict]:
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, Job._meta.db_table)
    return {name: found[name] for name in found if found[name]["index"]}


def index_sql(name: str) -> str:
    """The index's definition as the database stores it (condition included)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = %s", [name])
        return cursor.fetchone()[0]


def test_0010_goes_back_and_forth():
    try:
        call_command("migrate", APP, BEFORE[1], verbosity=0)
        before = indexes()
        assert FK_INDEX in before and "wq_job_workflow" not in before
        assert "unique_key" not in index_sql("wq_job_unique_active").split("WHERE")[1]

        call_command("migrate", APP, AFTER[1], verbosity=0)
    finally:
        call_command("migrate", verbosity=0)  # whatever happened, the latest schema again

    after = indexes()
    assert FK_INDEX not in after
    assert "IS NOT NULL" in index_sql("wq_job_workflow")
    condition = index_sql("wq_job_unique_active").split("WHERE")[1]
    assert "status" in condition and "unique_key" in condition
    assert not [name for name in after if name.endswith("_new")]  # the temporary name is gone


def test_0010_still_refuses_a_second_unfinished_job_with_the_same_key():
    Job.objects.create(task_name="t", unique_key="k", status="ready")
    Job.objects.create(task_name="t", status="ready")  # no key: never a conflict
    Job.objects.create(task_name="t", status="ready")
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.create(task_name="t", unique_key="k", status="running")


@pytest.mark.postgres_only
def test_0010_builds_and_drops_indexes_concurrently_on_postgresql():
    executor = MigrationExecutor(connection)
    state = executor.loader.project_state(BEFORE)
    migration = executor.loader.get_migration(*AFTER)
    with connection.schema_editor(collect_sql=True, atomic=False) as editor:
        migration.apply(state, editor, collect_sql=True)
    statements = [sql for sql in editor.collected_sql if not sql.startswith("--")]

    assert not migration.atomic
    assert statements and all(
        " CONCURRENTLY " in sql for sql in statements if not sql.startswith("ALTER INDEX")
    )
    # the new unique index exists before the old one is dropped: uniqueness never lapses
    build = next(i for i, sql in enumerate(statements) if "CREATE UNIQUE INDEX" in sql)
    drop = statements.index('DROP INDEX CONCURRENTLY IF EXISTS "wq_job_unique_active";')
    assert build < drop

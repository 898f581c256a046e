"""Migration 0010 changes the jobs table's indexes without blocking its writes on PostgreSQL
(``db/migration_ops.py``), and is reversible on both databases."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, migrations, models, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.optimizer import MigrationOptimizer
from django.test.utils import CaptureQueriesContext

from django_workqueue.db.migration_ops import ReplaceIndexConcurrently
from django_workqueue.db.migration_ops import ReplaceUniqueIndexConcurrently as ReplaceUnique
from django_workqueue.models import Job, PostgreSQLPartialIndex

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


def replace_unique_forwards(captured: list[str]) -> None:
    """Run 0010's unique-index replacement alone, as a rerun of the migration would."""
    executor = MigrationExecutor(connection)
    migration = executor.loader.get_migration(*AFTER)
    operation = next(op for op in migration.operations if isinstance(op, ReplaceUnique))
    before = executor.loader.project_state(BEFORE)
    after = before.clone()
    operation.state_forwards(APP, after)
    with CaptureQueriesContext(connection) as queries, connection.schema_editor(atomic=False) as ed:
        operation.database_forwards(APP, ed, before, after)
    captured.extend(query["sql"] for query in queries.captured_queries)


@pytest.mark.postgres_only
def test_a_rerun_after_the_old_unique_index_was_dropped_keeps_the_new_one():
    """The run stopped after dropping the old index, before the rename: the valid new index
    under its temporary name is the only one enforcing uniqueness, and is kept, not rebuilt."""
    with connection.cursor() as cursor:
        cursor.execute('ALTER INDEX "wq_job_unique_active" RENAME TO "wq_job_unique_active_new"')
    statements: list[str] = []

    replace_unique_forwards(statements)

    assert not [sql for sql in statements if "CREATE UNIQUE INDEX" in sql]
    kept = 'DROP INDEX CONCURRENTLY IF EXISTS "wq_job_unique_active_new"'
    assert not [sql for sql in statements if kept in sql]
    assert "unique_key IS NOT NULL" in index_sql("wq_job_unique_active")
    assert "wq_job_unique_active_new" not in indexes()


@pytest.mark.postgres_only
def test_a_rerun_after_a_failed_concurrent_build_drops_the_invalid_index_and_builds_again():
    """A concurrent build that failed leaves an invalid index of its name: dropped, rebuilt."""
    Job.objects.create(task_name="t", status="ready")
    Job.objects.create(task_name="t", status="ready")
    with connection.cursor() as cursor, pytest.raises(IntegrityError):
        # duplicate task names: the build fails and leaves the index behind, invalid
        cursor.execute(
            'CREATE UNIQUE INDEX CONCURRENTLY "wq_job_unique_active_new" '
            'ON "django_workqueue_job" ("task_name")'
        )
    statements: list[str] = []

    replace_unique_forwards(statements)

    assert any("CREATE UNIQUE INDEX CONCURRENTLY" in sql for sql in statements)
    assert "unique_key IS NOT NULL" in index_sql("wq_job_unique_active")
    assert "wq_job_unique_active_new" not in indexes()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT bool_and(i.indisvalid) FROM pg_index AS i JOIN pg_class AS c "
            "ON c.oid = i.indexrelid WHERE c.relname LIKE 'wq_job_unique_active%%'"
        )
        assert cursor.fetchone()[0] is True


LAST_BEFORE_0017, MIGRATION_0017 = (
    "0016_job_claimed_ahead",
    "0017_job_status_finished_partial_on_postgresql",
)


def test_0017_leaves_waiting_and_running_jobs_out_of_the_finished_index_on_postgresql_only():
    """wq_job_status_finished holds ended jobs only on PostgreSQL (a job writes no entry there
    when it is enqueued or claimed); on SQLite every row, as before (its planner would not
    prove the condition from a status filter). Back and forth on both databases."""
    try:
        call_command("migrate", APP, LAST_BEFORE_0017, verbosity=0)
        assert "WHERE" not in index_sql("wq_job_status_finished")
        call_command("migrate", APP, MIGRATION_0017, verbosity=0)
    finally:
        call_command("migrate", verbosity=0)  # whatever happened, the latest schema again

    definition = index_sql("wq_job_status_finished")
    if connection.vendor == "postgresql":
        condition = definition.split("WHERE")[1]
        assert all(status in condition for status in ("succeeded", "failed", "cancelled"))
        assert "running" not in condition and "ready" not in condition
    else:
        assert "WHERE" not in definition and "status" in definition
    assert indexes()["wq_job_status_finished"]["columns"] == ["status", "finished_at"]
    assert not [name for name in indexes() if name.endswith("_new")]


@pytest.mark.postgres_only
def test_0017_builds_the_partial_index_before_it_drops_the_whole_one():
    """Retention and the lists of ended jobs always have an index: the partial one is built
    CONCURRENTLY under a temporary name, then the whole one dropped (CONCURRENTLY), then the
    new one renamed."""
    executor = MigrationExecutor(connection)
    state = executor.loader.project_state((APP, LAST_BEFORE_0017))
    migration = executor.loader.get_migration(APP, MIGRATION_0017)
    with connection.schema_editor(collect_sql=True, atomic=False) as editor:
        migration.apply(state, editor, collect_sql=True)
    statements = [sql for sql in editor.collected_sql if not sql.startswith("--")]

    assert not migration.atomic
    assert [sql.split(" ON ")[0] for sql in statements] == [
        'CREATE INDEX CONCURRENTLY "wq_job_status_finished_new"',
        'DROP INDEX CONCURRENTLY IF EXISTS "wq_job_status_finished";',
        'ALTER INDEX "wq_job_status_finished_new" RENAME TO "wq_job_status_finished";',
    ]
    assert "WHERE" in statements[0]


def test_squashing_keeps_a_replacement_apart_from_the_model_it_replaces_in():
    """The migration optimizer (``squashmigrations``) folds an ``AddIndex`` or ``AddConstraint``
    into a ``CreateModel`` of its model; a replacement folded so would keep the old index beside
    the new one. Neither replacing operation is folded."""
    old_index = models.Index(fields=["status"], name="wq_t_status")
    new_index = PostgreSQLPartialIndex(
        fields=["status"], name="wq_t_status", condition=models.Q(status="failed")
    )
    unique = {"fields": ["key"], "name": "wq_t_key"}
    old_unique = models.UniqueConstraint(**unique, condition=models.Q(status="ready"))
    new_unique = models.UniqueConstraint(**unique, condition=models.Q(status__in=["ready", "held"]))
    text = models.CharField(max_length=9)
    fields = [("id", models.AutoField(primary_key=True)), ("status", text), ("key", text)]
    created = migrations.CreateModel(
        "T", fields, options={"indexes": [old_index], "constraints": [old_unique]}
    )
    replacements = [ReplaceIndexConcurrently("t", new_index, old=old_index),
                    ReplaceUnique("t", new_unique, old=old_unique)]  # fmt: skip

    optimized = MigrationOptimizer().optimize([created, *replacements], APP)

    assert optimized == [created, *replacements]

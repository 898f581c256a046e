"""Fewer index entries per job on PostgreSQL: ``wq_job_status_finished`` holds ended jobs only
there, so a job writes nothing in it when it is enqueued or claimed, only when it ends. On SQLite
it keeps every row (``PostgreSQLPartialIndex``): SQLite's planner would not use it for its
queries that filter on a status.

On PostgreSQL the new index is built CONCURRENTLY under a temporary name before the old one is
dropped and it is renamed (``db/migration_ops.py``), so the migration is not atomic; if it fails
halfway, run it again."""

from django.db import migrations, models

import django_workqueue.models
from django_workqueue.db.migration_ops import ReplaceIndexConcurrently


class Migration(migrations.Migration):
    atomic = False  # PostgreSQL builds an index CONCURRENTLY only outside a transaction

    dependencies = [
        ("django_workqueue", "0016_job_claimed_ahead"),
    ]

    operations = [
        ReplaceIndexConcurrently(
            model_name="job",
            index=django_workqueue.models.PostgreSQLPartialIndex(
                condition=models.Q(("status__in", ["succeeded", "failed", "cancelled"])),
                fields=["status", "finished_at"],
                name="wq_job_status_finished",
            ),
            old=models.Index(fields=["status", "finished_at"], name="wq_job_status_finished"),
        ),
    ]

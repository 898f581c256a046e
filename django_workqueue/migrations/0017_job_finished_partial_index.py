"""Fewer index entries per job: the ``(status, finished_at)`` index holds finished jobs only
(``wq_job_finished`` replaces ``wq_job_status_finished``, which held every row), so a job writes
nothing there when it is enqueued and when it is claimed, only when it ends.

The new index is built before the old one is dropped, so retention and the lists of finished
jobs always have one. On PostgreSQL both steps run CONCURRENTLY (``db/migration_ops.py``), so
the migration is not atomic; if it fails halfway, run it again."""

from django.db import migrations, models

from django_workqueue.db.migration_ops import AddIndexConcurrently, DropIndexConcurrently


class Migration(migrations.Migration):

    atomic = False  # PostgreSQL builds an index CONCURRENTLY only outside a transaction

    dependencies = [
        ('django_workqueue', '0016_job_claimed_ahead'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(condition=models.Q(('status__in', ['succeeded', 'failed', 'cancelled']), ('finished_at__isnull', False), _connector='OR'), fields=['status', 'finished_at'], name='wq_job_finished'),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.RemoveIndex(model_name='job', name='wq_job_status_finished')],
            database_operations=[
                DropIndexConcurrently(
                    model_name='job',
                    name='wq_job_status_finished',
                    table='django_workqueue_job',
                    columns=['status', 'finished_at'],
                ),
            ],
        ),
    ]

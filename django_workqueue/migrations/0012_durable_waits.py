"""Durable waits: the checkpoints of a job's body (``context.step``, ``context.sleep``,
``context.wait_for_signal``), the signals sent to jobs and workflows, and the ``waiting`` status
in the partial indexes' lists of unfinished statuses.

On PostgreSQL the jobs table's indexes are rebuilt CONCURRENTLY (``db/migration_ops.py``), so
the migration is not atomic; if it fails halfway, run it again."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

from django_workqueue.db.migration_ops import (
    AddIndexConcurrently,
    DropIndexConcurrently,
    ReplaceUniqueIndexConcurrently,
)


class Migration(migrations.Migration):

    atomic = False  # PostgreSQL builds an index CONCURRENTLY only outside a transaction

    dependencies = [
        ('django_workqueue', '0011_workerprocess_liveness'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='job',
            options={'ordering': ['-id'], 'permissions': [('view_job_payload', 'Can view job arguments and results'), ('view_job_traceback', 'Can view job tracebacks'), ('cancel_job', 'Can cancel jobs'), ('retry_job', 'Can retry and redrive jobs'), ('hold_job', 'Can hold and release jobs'), ('signal_job', 'Can send signals to jobs and workflows'), ('purge_job', 'Can purge finished jobs'), ('manage_queue', 'Can pause and resume queues'), ('manage_schedule', 'Can manage schedules')]},
        ),
        migrations.CreateModel(
            name='Checkpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('step', 'Step'), ('sleep', 'Sleep'), ('wait', 'Wait for a signal')], default='step', max_length=8)),
                ('name', models.CharField(max_length=200)),
                ('result', models.JSONField(blank=True, null=True)),
                ('wakes_at', models.DateTimeField(blank=True, null=True)),
                ('signal', models.CharField(blank=True, default='', max_length=200)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
        ),
        migrations.CreateModel(
            name='Signal',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=200)),
                ('payload', models.JSONField(blank=True, null=True)),
                ('sent_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('delivered_at', models.DateTimeField(blank=True, null=True)),
                ('delivered_to', models.BigIntegerField(blank=True, null=True)),
            ],
            options={
                'ordering': ['id'],
            },
        ),
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.CharField(choices=[('blocked', 'Blocked'), ('scheduled', 'Scheduled'), ('ready', 'Ready'), ('held', 'Held'), ('waiting', 'Waiting'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='ready', max_length=16),
        ),
        # The stats' index of unfinished rows counts waiting jobs too: dropped and built again
        # (briefly, the stats read the table without it).
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.RemoveIndex(model_name='job', name='wq_job_active')],
            database_operations=[
                DropIndexConcurrently(
                    model_name='job',
                    name='wq_job_active',
                    table='django_workqueue_job',
                    columns=['queue', 'task_name', 'status', 'run_after'],
                ),
            ],
        ),
        AddIndexConcurrently(
            model_name='job',
            index=models.Index(condition=models.Q(('status__in', ['blocked', 'scheduled', 'ready', 'held', 'waiting', 'running'])), fields=['queue', 'task_name', 'status', 'run_after'], name='wq_job_active'),
        ),
        # A waiting job keeps its unique key: the new condition refuses every row the old one
        # refused, so it is built beside the old one and replaces it.
        ReplaceUniqueIndexConcurrently(
            model_name='job',
            constraint=models.UniqueConstraint(condition=models.Q(('status__in', ['blocked', 'scheduled', 'ready', 'held', 'waiting', 'running']), ('unique_key__isnull', False)), fields=('task_name', 'unique_key'), name='wq_job_unique_active'),
            old=models.UniqueConstraint(condition=models.Q(('status__in', ['blocked', 'scheduled', 'ready', 'held', 'running']), ('unique_key__isnull', False)), fields=('task_name', 'unique_key'), name='wq_job_unique_active'),
        ),
        migrations.AddField(
            model_name='checkpoint',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='django_workqueue.job'),
        ),
        migrations.AddField(
            model_name='signal',
            name='job',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='signals', to='django_workqueue.job'),
        ),
        migrations.AddField(
            model_name='signal',
            name='workflow',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='signals', to='django_workqueue.workflow'),
        ),
        migrations.AddIndex(
            model_name='checkpoint',
            index=models.Index(condition=models.Q(('kind', 'wait'), ('result__isnull', True), ('wakes_at__isnull', False)), fields=['wakes_at'], name='wq_checkpoint_wait_timeout'),
        ),
        migrations.AddConstraint(
            model_name='checkpoint',
            constraint=models.UniqueConstraint(fields=('job', 'kind', 'name'), name='wq_checkpoint_name'),
        ),
        migrations.AddConstraint(
            model_name='signal',
            constraint=models.CheckConstraint(condition=models.Q(('job__isnull', False), ('workflow__isnull', False), _connector='OR'), name='wq_signal_has_target'),
        ),
    ]

"""Durable waits: the checkpoints of a job's body (``context.step``, ``context.sleep``)."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_workqueue', '0011_workerprocess_liveness'),
    ]

    operations = [
        migrations.CreateModel(
            name='Checkpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('step', 'Step'), ('sleep', 'Sleep')], default='step', max_length=8)),
                ('name', models.CharField(max_length=200)),
                ('result', models.JSONField(blank=True, null=True)),
                ('wakes_at', models.DateTimeField(blank=True, null=True)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('job', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='django_workqueue.job')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('job', 'kind', 'name'), name='wq_checkpoint_name')],
            },
        ),
    ]

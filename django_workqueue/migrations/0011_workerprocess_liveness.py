"""A worker's liveness token: what tells, without waiting for a lease, that its process is gone
(``maintenance/liveness.py``)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_workqueue", "0010_job_partial_indexes")]

    operations = [
        migrations.AddField(
            model_name="workerprocess",
            name="liveness",
            field=models.CharField(
                blank=True,
                default="",
                help_text="What the database's driver checks to tell that the process is gone "
                "(the key of its session's lock, or its pid's start on its host); empty: leases "
                "only.",
                max_length=100,
            ),
        ),
    ]

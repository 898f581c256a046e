"""When a worker took its liveness token: on PostgreSQL a key taken before the server's last
start proves nothing, every session having ended then (``db/pg_liveness.py``)."""

from django.db import migrations, models
from django.db.models.functions import Now


class Migration(migrations.Migration):
    dependencies = [("django_workqueue", "0014_checkpoint_task_version")]

    operations = [
        migrations.AddField(
            model_name="workerprocess",
            name="liveness_since",
            field=models.DateTimeField(
                db_default=Now(),
                help_text="When the process took its liveness token, by the database's clock. "
                "On PostgreSQL a key taken before the server's last start proves nothing (every "
                "session ended then): leases only, until the worker takes its key again.",
            ),
        ),
    ]
